//! The platform profile loader (`Profile::parse`, what `--profile FILE` reads) on arbitrary text:
//! it must never panic, errors are values. A profile it accepts must answer every question the
//! model asks of it with a usable figure: positive, finite bandwidth for any mix, a positive idle
//! latency, loaded-latency curves of at least two points.
#![no_main]

use cxltier_profile::{Mix, Profile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let profile = match Profile::parse(text, "fuzz.toml") {
        Ok(p) => p,
        Err(e) => {
            // The error renders (origin:line:column: reason) and points inside the text.
            let _ = e.to_string();
            if let Some(line) = e.line {
                assert!(
                    line >= 1 && line <= text.lines().count().max(1) + 1,
                    "line {line}"
                );
            }
            return;
        }
    };
    // Every mix a profile or `--mix` can name (terms up to 1000), at the edges and in between.
    let mut mixes: Vec<Mix> = Mix::common().to_vec();
    for reads in [0, 1, 2, 3, 7, 1000] {
        for writes in [0, 1, 2, 5, 999, 1000] {
            for nt in [false, true] {
                if let Ok(m) = Mix::new(reads, writes, nt) {
                    mixes.push(m);
                }
            }
        }
    }
    for t in &profile.tiers {
        assert!(t.idle_latency_ns.is_finite() && t.idle_latency_ns > 0.0);
        for &m in &mixes {
            let bw = t.peak_bandwidth(m);
            assert!(
                bw.is_finite() && bw > 0.0,
                "tier {}: {bw} GB/s for mix {m}",
                t.name
            );
        }
        let fw = t.firmware_bandwidth();
        assert!(
            fw.is_finite() && fw > 0.0,
            "tier {}: firmware bandwidth {fw}",
            t.name
        );
        for c in &t.loaded_latency {
            assert!(
                c.points.len() >= 2,
                "tier {}: a curve of {} points",
                t.name,
                c.points.len()
            );
        }
    }
});
