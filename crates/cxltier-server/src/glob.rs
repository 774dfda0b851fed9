//! Redis's glob-style patterns (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a]`, `[a-z]`, `\`
//! escapes, optionally case-insensitive. For CONFIG GET, and for KEYS, SCAN MATCH and PSUBSCRIBE
//! when they come.
//!
//! The pattern comes from the client, so the matcher must not be a weapon: no recursion (200,000
//! `*` would overflow the stack) and no exponential backtracking (`*` eighteen times then `x`
//! against a long string). Every token but `*` matches exactly one byte, so when a match fails it
//! is enough to retry from the last `*` seen, one byte further into the string: the earlier stars
//! can only absorb what the last one could. That is at most O(|pattern| · |string|) steps.

/// Whether `s` matches `pattern`; `nocase` folds ASCII case as Redis does.
pub fn matches(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    nested_stars(pattern) <= MAX_NESTED_STARS && matches_counting(pattern, s, nocase, &mut 0)
}

/// Redis's guard against abusive patterns (`stringmatchlen`'s nesting limit): its matcher
/// recurses once for each `*` (a run of them counting once) that more pattern follows, and past
/// 1,000 of them answers no match. Such a pattern matches nothing here either, as clients of
/// Redis see it (the suite's "Regression for pattern matching very long nested loops"), though
/// this matcher has no recursion to guard.
const MAX_NESTED_STARS: usize = 1000;

/// The runs of `*` in `pattern` that more pattern follows (a `*` escaped or inside `[...]` is
/// none). Linear in the pattern's length.
fn nested_stars(pattern: &[u8]) -> usize {
    let (mut p, mut runs) = (0, 0);
    while p < pattern.len() {
        if pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            runs += usize::from(p < pattern.len());
        } else {
            p = token(pattern, p, 0, false, &mut 0).1;
        }
    }
    runs
}

/// [`matches`], adding the pattern bytes examined to `steps` (for tests of the work bound).
fn matches_counting(pattern: &[u8], s: &[u8], nocase: bool, steps: &mut u64) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    // After the last `*` met: where its following pattern starts, and the string position it
    // is tried at now.
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        *steps += 1;
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                *steps += 1;
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, i));
            continue;
        }
        if p < pattern.len() {
            let (ok, next) = token(pattern, p, s[i], nocase, steps);
            if ok {
                p = next;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        *steps += 1;
        p += 1;
    }
    p == pattern.len()
}

fn eq(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

/// Whether the one-byte token at `pattern[p]` (not `*`) matches `c`, and where the next token
/// starts. Follows Redis's reading of odd patterns: a trailing `\` is a literal `\`, `[]`
/// matches nothing, an unclosed `[` runs to the end of the pattern, `[z-a]` is `[a-z]`.
fn token(pattern: &[u8], mut p: usize, c: u8, nocase: bool, steps: &mut u64) -> (bool, usize) {
    let n = pattern.len();
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < n => (eq(pattern[p + 1], c, nocase), p + 2),
        b'[' => {
            p += 1;
            let not = p < n && pattern[p] == b'^';
            if not {
                p += 1;
            }
            let mut hit = false;
            loop {
                *steps += 1;
                if p >= n {
                    break;
                }
                if pattern[p] == b'\\' && p + 1 < n {
                    // Escaped inside a class: compared exactly, as Redis does.
                    hit |= pattern[p + 1] == c;
                    p += 2;
                } else if pattern[p] == b']' {
                    p += 1;
                    break;
                } else if p + 2 < n && pattern[p + 1] == b'-' {
                    let (mut lo, mut hi, mut ch) = (pattern[p], pattern[p + 2], c);
                    if lo > hi {
                        std::mem::swap(&mut lo, &mut hi);
                    }
                    if nocase {
                        lo = lo.to_ascii_lowercase();
                        hi = hi.to_ascii_lowercase();
                        ch = ch.to_ascii_lowercase();
                    }
                    hit |= (lo..=hi).contains(&ch);
                    p += 3;
                } else {
                    hit |= eq(pattern[p], c, nocase);
                    p += 1;
                }
            }
            (hit != not, p)
        }
        lit => (eq(lit, c, nocase), p + 1),
    }
}

/// DEBUG STRINGMATCH-TEST: Redis's fuzz run of its matcher (random patterns and strings of
/// up to 31 bytes below 128), here `cycles` of them; returns how many matched. A pattern that
/// broke the matcher's bounds would panic, which is what the run looks for.
pub fn fuzz_check(cycles: u32) -> u32 {
    // A fixed linear congruential sequence: the run is the same every time.
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as u8
    };
    let mut matched = 0;
    for _ in 0..cycles {
        let s: Vec<u8> = (0..next() % 32).map(|_| next() % 128).collect();
        let p: Vec<u8> = (0..next() % 32).map(|_| next() % 128).collect();
        matched += u32::from(matches(&p, &s, false));
    }
    matched
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past 1,000 nested stars nothing matches, as in Redis; up to it, the match is the glob's.
    #[test]
    fn more_than_a_thousand_nested_stars_match_nothing() {
        let key = vec![b'a'; 50_000];
        assert!(!matches(&b"*?".repeat(50_000), &key, false));
        assert!(!matches(&b"*a".repeat(1001), &key, false));
        assert!(matches(&b"*a".repeat(1000), &key, false));
        // A run of stars counts once, a final run not at all, escaped or classed stars never.
        assert!(matches(
            &[b"*".repeat(5000), b"a".to_vec()].concat(),
            b"ba",
            false
        ));
        assert!(matches(
            &[b"a".to_vec(), b"*".repeat(5000)].concat(),
            b"ab",
            false
        ));
        assert!(matches(&b"[*]\\*".repeat(2000), &b"**".repeat(2000), false));
        assert_eq!(nested_stars(b"a*b**c*"), 2);
    }

    /// Cases checked against Redis 7's `stringmatchlen` (util.c) and its test suite.
    #[test]
    fn redis_semantics() {
        let cases: &[(&str, &str, bool, bool)] = &[
            // pattern, string, nocase, matches
            ("", "", false, true),
            ("", "a", false, false),
            ("*", "", false, true),
            ("*", "anything", false, true),
            ("**", "", false, true),
            ("a*", "abc", false, true),
            ("a*", "bac", false, false),
            ("*c", "abc", false, true),
            ("a*c", "ac", false, true),
            ("a*c", "abcbc", false, true),
            ("a*c", "abcb", false, false),
            ("a*b*c", "axxbyyc", false, true),
            ("a*b*c", "axxcyyb", false, false),
            ("?", "a", false, true),
            ("?", "", false, false),
            ("??", "a", false, false),
            ("h?llo", "hello", false, true),
            ("h?llo", "hllo", false, false),
            ("h*llo", "hllo", false, true),
            ("h*llo", "heeeello", false, true),
            ("h[ae]llo", "hello", false, true),
            ("h[ae]llo", "hallo", false, true),
            ("h[ae]llo", "hillo", false, false),
            ("h[^e]llo", "hallo", false, true),
            ("h[^e]llo", "hello", false, false),
            ("h[a-b]llo", "hbllo", false, true),
            ("h[a-b]llo", "hcllo", false, false),
            ("h[b-a]llo", "hallo", false, true),
            ("[]", "a", false, false),
            ("[]", "", false, false),
            ("[^]", "a", false, true),
            ("[abc", "b", false, true),
            ("[abc", "d", false, false),
            ("[a-", "-", false, true),
            ("[\\]]", "]", false, true),
            ("[\\-]", "-", false, true),
            ("[a\\-z]", "b", false, false),
            ("\\*", "*", false, true),
            ("\\*", "a", false, false),
            ("\\?", "?", false, true),
            ("\\[a]", "[a]", false, true),
            ("a\\", "a\\", false, true),
            ("*\\", "abc\\", false, true),
            ("maxmemory*", "maxmemory-policy", false, true),
            ("MAXMEMORY", "maxmemory", false, false),
            ("MAXMEMORY", "maxmemory", true, true),
            ("MAX*", "maxmemory-policy", true, true),
            ("[A-C]", "b", true, true),
            ("[a-c]", "B", true, true),
            ("[ABC]", "b", true, true),
            ("\\A", "a", true, true),
            ("[^A]", "a", true, false),
            ("*-*-*", "proto-max-bulk-len", false, true),
            (
                "*a*a*a*a*b",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab",
                false,
                true,
            ),
            (
                "*a*a*a*a*b",
                "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                false,
                false,
            ),
        ];
        for &(p, s, nocase, want) in cases {
            assert_eq!(
                matches(p.as_bytes(), s.as_bytes(), nocase),
                want,
                "pattern {p:?} string {s:?} nocase {nocase}"
            );
        }
    }

    /// 200,000 stars: no recursion, so no stack overflow (the old recursive matcher crashed the
    /// server on this), and the run of stars is stepped over once.
    #[test]
    fn a_long_run_of_stars_neither_overflows_nor_repeats() {
        let mut p = vec![b'*'; 200_000];
        assert!(matches(&p, b"maxmemory", false));
        p.push(b'x');
        let mut steps = 0;
        assert!(!matches_counting(&p, b"maxmemory", false, &mut steps));
        assert!(steps < 1_000_000, "{steps} steps");
    }

    /// Eighteen stars then `x` against a string without one: exponential for a backtracking
    /// matcher (the old one froze the server ~40 s), at most |pattern|·|string| steps here.
    #[test]
    fn stars_then_a_missing_byte_take_bounded_work() {
        let mut p = b"*".repeat(18);
        p.push(b'x');
        for s in [&b"maxmemory-policy"[..], &[b'a'; 4096][..]] {
            let mut steps = 0;
            assert!(!matches_counting(&p, s, false, &mut steps));
            let bound = ((p.len() + 2) * (s.len() + 2)) as u64;
            assert!(steps <= bound, "{steps} steps > {bound}");
        }
        let p = b"*a".repeat(50);
        let s = vec![b'a'; 10_000];
        let mut steps = 0;
        assert!(matches_counting(&p, &s, false, &mut steps));
        assert!(steps <= ((p.len() + 2) * (s.len() + 2)) as u64);
    }
}
