//! The tierd policy loader (`Policy::parse`, what `--policy FILE` reads) on arbitrary text: it
//! must never panic, errors are values. A policy it accepts must be usable as it stands by what
//! consumes it: a DRAM budget that parses, an `nr_accesses` scale of at least 1 that is the real
//! ratio of the intervals, DAMON intervals that fit in microseconds (what `damon` writes to
//! sysfs), and it must survive being written back as TOML and read again unchanged.
#![no_main]

use cxltier_tierd::Policy;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let policy = match Policy::parse(text, Path::new("fuzz.toml")) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    policy
        .validate()
        .expect("an accepted policy validates again");
    // The DRAM budget is parsed with the policy: an accepted policy holds it in bytes.
    let _budget: Option<u64> = policy.dram_budget_bytes();
    let t = &policy.tracking;
    let ratio = t.aggregation_ms / t.sample_ms.max(1);
    let max = policy.max_accesses();
    assert!(max >= 1, "max_accesses {max}");
    assert_eq!(
        u64::from(max),
        ratio.max(1),
        "max_accesses is not aggregation_ms / sample_ms"
    );
    for (name, ms) in [
        ("sample_ms", t.sample_ms),
        ("aggregation_ms", t.aggregation_ms),
        ("update_ms", t.update_ms),
    ] {
        assert!(
            ms.checked_mul(1000).is_some(),
            "{name} = {ms} overflows in microseconds"
        );
    }
    let _ = policy.interval();
    let written = toml::to_string(&policy).expect("an accepted policy serialises");
    let back = Policy::parse(&written, Path::new("written.toml"))
        .unwrap_or_else(|e| panic!("the policy written back is refused: {e}\n{written}"));
    assert_eq!(
        back, policy,
        "the policy changed on a round trip through TOML:\n{written}"
    );
});
