//! The driver's generators against YCSB's own (fixtures from site.ycsb:core:0.17.0, written by
//! tests/fixtures/regen.sh): exact equality where YCSB is deterministic, and a distribution test
//! where it draws random numbers.

use cxltier_ycsb::generator::*;
use cxltier_ycsb::{Op, Spec};
use rand::rngs::SmallRng;
use rand::SeedableRng;

const ITEMS: usize = 1000;
const DRAWS: usize = 2_000_000;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn counts(name: &str) -> Vec<f64> {
    fixture(name)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// Total variation distance between two histograms (as distributions).
fn tvd(a: &[f64], b: &[f64]) -> f64 {
    let (sa, sb): (f64, f64) = (a.iter().sum(), b.iter().sum());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x / sa - y / sb).abs())
        .sum::<f64>()
        / 2.0
}

/// Two samples of 2·10^6 draws over 1000 bins differ by about 0.01 in total variation from
/// sampling noise alone; 0.03 leaves room for that and still fails any real difference (the
/// negative controls below are 0.3 and more apart).
const SAME: f64 = 0.03;

fn ours(mut draw: impl FnMut(&mut SmallRng) -> i64) -> Vec<f64> {
    let mut rng = SmallRng::seed_from_u64(7);
    let mut h = vec![0.0; ITEMS];
    for _ in 0..DRAWS {
        h[draw(&mut rng) as usize] += 1.0;
    }
    h
}

#[test]
fn key_names_and_fnv_hashes_are_ycsbs() {
    let text = fixture("keys.txt");
    let mut lines = text.lines();
    for k in 0..500 {
        assert_eq!(key_name(k, 1), lines.next().unwrap(), "keynum {k}");
    }
    for l in lines {
        let (input, hash) = l.split_once(' ').unwrap();
        assert_eq!(
            fnvhash64(input.parse().unwrap()).to_string(),
            hash,
            "fnvhash64({input})"
        );
    }
}

#[test]
fn constants_are_ycsbs() {
    let c = fixture("constants.txt");
    let v: Vec<&str> = c.lines().collect();
    assert_eq!(v[0].parse::<f64>().unwrap(), SCRAMBLED_ZETAN);
    assert_eq!(v[1].parse::<i64>().unwrap(), SCRAMBLED_ITEM_COUNT);
    assert_eq!(v[2].parse::<f64>().unwrap(), ZIPFIAN_CONSTANT);
}

#[test]
fn scrambled_zipfian_matches() {
    let mut g = ScrambledZipfian::new(0, ITEMS as i64 - 1);
    let mine = ours(|r| g.next(r));
    let theirs = counts("scrambled_zipfian.txt");
    let d = tvd(&mine, &theirs);
    assert!(
        d < SAME,
        "scrambled zipfian differs from YCSB's: TVD {d:.4}"
    );
    // Negative control: the plain (unscrambled) zipfian is far from it.
    let far = tvd(&counts("zipfian.txt"), &theirs);
    assert!(far > 10.0 * SAME, "control: {far}");
}

#[test]
fn zipfian_uniform_hotspot_and_latest_match() {
    let mut z = Zipfian::new(0, ITEMS as i64 - 1);
    let d = tvd(&ours(|r| z.next(r)), &counts("zipfian.txt"));
    assert!(d < SAME, "zipfian TVD {d:.4}");
    let u = Uniform::new(0, ITEMS as i64 - 1);
    let d = tvd(&ours(|r| u.next(r)), &counts("uniform.txt"));
    assert!(d < SAME, "uniform TVD {d:.4}");
    let h = Hotspot::new(0, ITEMS as i64 - 1, 0.2, 0.8);
    let d = tvd(&ours(|r| h.next(r)), &counts("hotspot.txt"));
    assert!(d < SAME, "hotspot TVD {d:.4}");
    // SkewedLatestGenerator(new CounterGenerator(1000)): the counter's last value is 999.
    let mut l = SkewedLatest::new(ITEMS as i64 - 1);
    let d = tvd(
        &ours(|r| l.next(r, ITEMS as i64 - 1)),
        &counts("latest.txt"),
    );
    assert!(d < SAME, "latest TVD {d:.4}");
    // Negative control: uniform is not zipfian.
    let far = tvd(&counts("uniform.txt"), &counts("zipfian.txt"));
    assert!(far > 10.0 * SAME, "control: {far}");
}

#[test]
fn operation_mixes_match() {
    let text = fixture("op_mix.txt");
    for (letter, line) in ['a', 'b', 'c', 'd', 'e', 'f'].into_iter().zip(text.lines()) {
        let theirs: Vec<f64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        let d = tvd(&op_mix(letter), &theirs);
        assert!(d < 0.002, "workload {letter}: TVD {d:.4}");
    }
}

/// How often core workload `letter` chooses each operation (read, update, insert, scan,
/// read-modify-write) in `DRAWS` draws.
fn op_mix(letter: char) -> Vec<f64> {
    let chooser = Spec::core(letter).unwrap().op_chooser();
    let mut rng = SmallRng::seed_from_u64(3);
    let mut mix = vec![0.0; 5];
    for _ in 0..DRAWS {
        let i = match chooser.next(&mut rng) {
            Op::Read => 0,
            Op::Update => 1,
            Op::Insert => 2,
            Op::Scan => 3,
            Op::ReadModifyWrite => 4,
        };
        mix[i] += 1.0;
    }
    mix
}

#[test]
fn data_integrity_values_are_ycsbs() {
    let text = fixture("deterministic_values.txt");
    let mut n = 0;
    for line in text.lines() {
        let mut parts = line.splitn(4, '\t');
        let (len, key, field, value) = (
            parts.next().unwrap().parse::<usize>().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        assert_eq!(
            String::from_utf8(cxltier_ycsb::workload::deterministic_value(key, field, len))
                .unwrap(),
            value,
            "{key} {field} at length {len}"
        );
        n += 1;
    }
    assert_eq!(n, 48, "every fixture line was checked");
}
