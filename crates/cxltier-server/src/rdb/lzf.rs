//! LZF decompression, as Redis's RDB strings use it (`RDB_ENC_LZF`): the format of liblzf's
//! `lzf_d.c`, written from its description. A stream is a series of runs, each starting with a
//! control byte `c`:
//!
//! - `c < 32`: a literal run, the next `c + 1` bytes copied as they are;
//! - otherwise a back reference: length `c >> 5` (7 means "7 plus the next byte"), plus 2, bytes
//!   copied from `((c & 0x1f) << 8) + next byte + 1` bytes back in the output (the copy may
//!   overlap what it writes, which repeats a pattern).
//!
//! The output never grows past the length the caller declares, and a reference never reaches
//! before the output's start: a corrupt stream is an error, not a panic or an overrun.

/// The most output one byte of LZF input can stand for: a 3-byte back reference (control, length
/// byte 255, offset) copies 7 + 255 + 2 = 264 bytes. A declared length above `input × 88` cannot
/// be met, so it is refused before anything is allocated.
pub const MAX_EXPANSION: usize = 88;

/// Why a stream did not decompress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LzfError {
    /// The declared length is more than the input could expand to.
    Claims,
    /// A run goes past the end of the input.
    TruncatedInput,
    /// A run would write past the declared length.
    OutputOverrun,
    /// A back reference points before the start of the output.
    BadReference,
    /// The input ended before the output reached its declared length.
    ShortOutput,
}

impl std::fmt::Display for LzfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LzfError::Claims => "its length is more than its compressed bytes can expand to",
            LzfError::TruncatedInput => "a run goes past the end of the compressed bytes",
            LzfError::OutputOverrun => "it expands past its declared length",
            LzfError::BadReference => "a back reference points before the start",
            LzfError::ShortOutput => "it expands to less than its declared length",
        })
    }
}

/// Decompress `input` to exactly `len` bytes, appended to `out`.
pub fn decompress_into(input: &[u8], len: usize, out: &mut Vec<u8>) -> Result<(), LzfError> {
    if len > input.len().saturating_mul(MAX_EXPANSION) {
        return Err(LzfError::Claims);
    }
    let start = out.len();
    let end = start + len;
    out.reserve(len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input.get(ip..ip + run).ok_or(LzfError::TruncatedInput)?;
            if out.len() + run > end {
                return Err(LzfError::OutputOverrun);
            }
            out.extend_from_slice(lit);
            ip += run;
        } else {
            let mut run = ctrl >> 5;
            if run == 7 {
                run += usize::from(*input.get(ip).ok_or(LzfError::TruncatedInput)?);
                ip += 1;
            }
            let low = usize::from(*input.get(ip).ok_or(LzfError::TruncatedInput)?);
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            run += 2;
            if out.len() + run > end {
                return Err(LzfError::OutputOverrun);
            }
            let from = out
                .len()
                .checked_sub(back)
                .filter(|&f| f >= start)
                .ok_or(LzfError::BadReference)?;
            // Byte by byte: the source may overlap what this run writes.
            for i in 0..run {
                let b = out[from + i];
                out.push(b);
            }
        }
    }
    if out.len() != end {
        return Err(LzfError::ShortOutput);
    }
    Ok(())
}

/// Compress `input` with a simple greedy LZF encoder (a hash of 3-byte prefixes, as liblzf's
/// own): for tests and the fuzz target, which need LZF streams to decode. `None` when the
/// output would not be smaller than the input (Redis then stores the string plain).
pub fn compress(input: &[u8]) -> Option<Vec<u8>> {
    const HASH: usize = 1 << 14;
    const MAX_OFF: usize = 1 << 13;
    const MAX_REF: usize = 264;
    let mut table = vec![usize::MAX; HASH];
    let mut out = Vec::with_capacity(input.len());
    let mut lit: Vec<u8> = Vec::with_capacity(32);
    let flush = |out: &mut Vec<u8>, lit: &mut Vec<u8>| {
        if !lit.is_empty() {
            out.push((lit.len() - 1) as u8);
            out.extend_from_slice(lit);
            lit.clear();
        }
    };
    let mut i = 0;
    while i < input.len() {
        let mut matched = 0;
        let mut off = 0;
        if i + 3 <= input.len() {
            let h = (usize::from(input[i]) << 16
                | usize::from(input[i + 1]) << 8
                | usize::from(input[i + 2]))
            .wrapping_mul(2_654_435_761)
                >> 8
                & (HASH - 1);
            let cand = table[h];
            table[h] = i;
            if cand != usize::MAX && i - cand <= MAX_OFF && i > cand {
                let most = (input.len() - i).min(MAX_REF);
                while matched < most && input[cand + matched] == input[i + matched] {
                    matched += 1;
                }
                off = i - cand - 1;
            }
        }
        if matched >= 3 {
            flush(&mut out, &mut lit);
            let l = matched - 2;
            if l < 7 {
                out.push(((l << 5) | (off >> 8)) as u8);
            } else {
                out.push(((7 << 5) | (off >> 8)) as u8);
                out.push((l - 7) as u8);
            }
            out.push(off as u8);
            i += matched;
        } else {
            lit.push(input[i]);
            if lit.len() == 32 {
                flush(&mut out, &mut lit);
            }
            i += 1;
        }
        if out.len() + lit.len() >= input.len() {
            return None;
        }
    }
    flush(&mut out, &mut lit);
    (out.len() < input.len()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(input: &[u8]) {
        let Some(c) = compress(input) else { return };
        let mut out = b"prefix".to_vec();
        decompress_into(&c, input.len(), &mut out).unwrap();
        assert_eq!(&out[6..], input);
    }

    #[test]
    fn compress_and_decompress_agree() {
        round_trip(b"");
        round_trip(&b"abcdefgh".repeat(40));
        round_trip(&[b'a'; 10_000]);
        let mut text = Vec::new();
        for i in 0..2000u32 {
            text.extend_from_slice(format!("member-{i} ").as_bytes());
        }
        round_trip(&text);
        // The densest stream: 264 bytes for every 3 input bytes.
        let c = compress(&[0u8; 100_000]).unwrap();
        assert!(c.len() * MAX_EXPANSION >= 100_000, "{}", c.len());
    }

    #[test]
    fn corrupt_streams_are_errors() {
        // (what, the stream, the length it declares, what `out` held before, the error)
        type Case = (&'static str, &'static [u8], usize, &'static [u8], LzfError);
        let cases: &[Case] = &[
            (
                "a literal of 3 bytes with 2 present",
                &[2, b'a', b'b'],
                3,
                b"",
                LzfError::TruncatedInput,
            ),
            (
                "a reference before any output",
                &[0x20, 0],
                3,
                b"",
                LzfError::BadReference,
            ),
            (
                "a reference into bytes that were in `out` before this string",
                &[0x20, 0],
                3,
                b"xyz",
                LzfError::BadReference,
            ),
            (
                "more output than declared",
                &[1, b'a', b'b'],
                1,
                b"",
                LzfError::OutputOverrun,
            ),
            (
                "less output than declared",
                &[0, b'a'],
                2,
                b"",
                LzfError::ShortOutput,
            ),
            // Refused before any allocation.
            (
                "a length no stream of this size can reach",
                &[0, b'a'],
                usize::MAX / 2,
                b"",
                LzfError::Claims,
            ),
        ];
        for (what, stream, len, before, err) in cases {
            let mut out = before.to_vec();
            assert_eq!(decompress_into(stream, *len, &mut out), Err(*err), "{what}");
        }
        // An overlapping reference repeats a pattern.
        let mut out = Vec::new();
        decompress_into(&[1, b'a', b'b', 0x40, 1], 6, &mut out).unwrap();
        assert_eq!(out, b"ababab");
    }
}
