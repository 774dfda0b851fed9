//! The RESP parser on arbitrary bytes, fed the way the server feeds it: the stream arrives in
//! pieces, and after each piece `parse` runs again and again from the first byte not yet consumed
//! (`parse_into_queue` in the server). Checks, for every command parsed:
//! - `consumed` is at least 1 (progress) and at most the bytes offered;
//! - every argument range lies inside the consumed bytes, in order, without overlap;
//!
//! and that the pieces do not change the outcome: the commands (as bytes) and whether the stream
//! ended in a protocol error are the same as when the whole input arrives at once.
#![no_main]

use cxltier_server::resp::parse;
use libfuzzer_sys::fuzz_target;

/// What a stream parsed to: each command's arguments, and whether it ended in a protocol error.
#[derive(Debug, PartialEq)]
struct Outcome {
    commands: Vec<Vec<Vec<u8>>>,
    error: bool,
}

/// Parse whatever complete commands the first `avail` bytes hold, from `at` on, as the server
/// does after a read; returns where the next command starts, or `None` after a protocol error.
fn drain(data: &[u8], avail: usize, mut at: usize, out: &mut Outcome) -> Option<usize> {
    while at < avail {
        let buf = &data[at..avail];
        match parse(buf) {
            Ok(Some(p)) => {
                assert!(p.consumed >= 1, "no progress: consumed 0 of {}", buf.len());
                assert!(
                    p.consumed <= buf.len(),
                    "consumed {} of {} bytes",
                    p.consumed,
                    buf.len()
                );
                let mut prev_end = 0;
                for r in &p.args {
                    assert!(
                        r.start <= r.end && r.end <= p.consumed,
                        "argument {r:?} outside the {} consumed bytes",
                        p.consumed
                    );
                    assert!(
                        r.start >= prev_end,
                        "argument {r:?} overlaps the one before"
                    );
                    prev_end = r.end;
                }
                out.commands
                    .push(p.args.iter().map(|r| buf[r.clone()].to_vec()).collect());
                at += p.consumed;
            }
            Ok(None) => break,
            Err(_) => {
                out.error = true;
                return None;
            }
        }
    }
    Some(at)
}

/// Chunk lengths from a small PRNG seeded by the input itself, so that each input is split its
/// own way and a crash reproduces from the input alone.
fn chunks(data: &[u8]) -> impl Iterator<Item = usize> {
    let mut x = data.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    }) | 1;
    std::iter::from_fn(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Mostly short pieces (the interesting splits land inside a header), sometimes long.
        Some(if x % 8 == 0 {
            1 + (x >> 8) as usize % 512
        } else {
            1 + (x >> 8) as usize % 8
        })
    })
}

fn run(data: &[u8], lengths: impl Iterator<Item = usize>) -> Outcome {
    let mut out = Outcome {
        commands: Vec::new(),
        error: false,
    };
    let mut at = 0;
    let mut avail = 0;
    for len in lengths {
        if avail >= data.len() {
            break;
        }
        avail = (avail + len).min(data.len());
        match drain(data, avail, at, &mut out) {
            Some(next) => at = next,
            None => break,
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let whole = run(data, std::iter::once(data.len()));
    let split = run(data, chunks(data));
    assert_eq!(whole, split, "the split stream parsed differently");
    // One byte per read, the worst case for a server that re-parses from the command's start;
    // only on short inputs, as it is quadratic.
    if data.len() <= 256 {
        let bytewise = run(data, std::iter::repeat(1));
        assert_eq!(
            whole, bytewise,
            "the stream fed byte by byte parsed differently"
        );
    }
});
