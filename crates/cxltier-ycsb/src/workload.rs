//! YCSB's CoreWorkload: the A–F operation mixes, the key choosers, the records.

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::generator::{
    key_name, AckCounter, Discrete, Hotspot, ScrambledZipfian, SkewedLatest, Uniform,
};

/// An operation of the mix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "SCREAMING-KEBAB-CASE")]
pub enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

impl Op {
    pub const ALL: [Op; 5] = [
        Op::Read,
        Op::Update,
        Op::Insert,
        Op::Scan,
        Op::ReadModifyWrite,
    ];
    /// YCSB's name for it in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "READ",
            Op::Update => "UPDATE",
            Op::Insert => "INSERT",
            Op::Scan => "SCAN",
            Op::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// `requestdistribution`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Distribution {
    Zipfian,
    Latest,
    Uniform,
    Hotspot,
}

/// The properties of one of YCSB's workload files (workloads/workloada .. workloadf).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Spec {
    pub name: char,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub distribution: Distribution,
    pub max_scan_length: i64,
}

impl Spec {
    /// YCSB's workload A–F.
    pub fn core(letter: char) -> Option<Spec> {
        let base = Spec {
            name: letter,
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            scan: 0.0,
            read_modify_write: 0.0,
            distribution: Distribution::Zipfian,
            max_scan_length: 100,
        };
        Some(match letter.to_ascii_lowercase() {
            'a' => Spec {
                read: 0.5,
                update: 0.5,
                ..base
            },
            'b' => Spec {
                read: 0.95,
                update: 0.05,
                ..base
            },
            'c' => Spec { read: 1.0, ..base },
            'd' => Spec {
                read: 0.95,
                insert: 0.05,
                distribution: Distribution::Latest,
                ..base
            },
            'e' => Spec {
                scan: 0.95,
                insert: 0.05,
                ..base
            },
            'f' => Spec {
                read: 0.5,
                read_modify_write: 0.5,
                ..base
            },
            _ => return None,
        })
    }

    /// The operation chooser, weights added in CoreWorkload's order.
    pub fn op_chooser(&self) -> Discrete<Op> {
        let mut d = Discrete::new();
        d.add(self.read, Op::Read);
        d.add(self.update, Op::Update);
        d.add(self.insert, Op::Insert);
        d.add(self.scan, Op::Scan);
        d.add(self.read_modify_write, Op::ReadModifyWrite);
        d
    }
}

/// What the threads share.
#[derive(Debug)]
pub struct Shared {
    pub spec: Spec,
    pub record_count: u64,
    pub insert_start: u64,
    pub field_count: usize,
    pub field_length: usize,
    pub zero_padding: usize,
    /// Operations planned for the run (YCSB sizes the zipfian range with it).
    pub operation_count: u64,
    /// Key numbers for inserts: during load from insert_start, during a run from record_count.
    pub inserts: AckCounter,
    /// YCSB's `dataintegrity`: values are a function of key and field, and reads check them.
    pub data_integrity: bool,
}

/// YCSB's `CoreWorkload.buildDeterministicValue`: `key:field`, then `:` and the Java hash of what
/// is there so far (the `:` included), repeated, cut to `len` bytes. A read can then check every byte it gets back.
pub fn deterministic_value(key: &str, field: &str, len: usize) -> Vec<u8> {
    let mut s = String::with_capacity(len + 12);
    s.push_str(key);
    s.push(':');
    s.push_str(field);
    while s.len() < len {
        // The separator goes in before the hash is taken, as in YCSB.
        s.push(':');
        let h = crate::generator::java_string_hash(&s);
        s.push_str(&h.to_string());
    }
    s.truncate(len);
    s.into_bytes()
}

/// One thread's generators.
pub struct ThreadGen {
    pub rng: SmallRng,
    shared: Arc<Shared>,
    chooser: Chooser,
    ops: Discrete<Op>,
    scan_length: Uniform,
    field: Uniform,
}

enum Chooser {
    Zipfian(ScrambledZipfian),
    Latest(SkewedLatest),
    Uniform(Uniform),
    Hotspot(Hotspot),
}

impl ThreadGen {
    pub fn new(shared: Arc<Shared>, seed: u64) -> ThreadGen {
        let s = &shared.spec;
        let start = shared.insert_start as i64;
        let count = shared.record_count as i64;
        let chooser = match s.distribution {
            Distribution::Zipfian => {
                // CoreWorkload: expectednewkeys = opcount * insertproportion * 2 (a fudge factor).
                let expected_new = (shared.operation_count as f64 * s.insert * 2.0) as i64;
                Chooser::Zipfian(ScrambledZipfian::new(start, start + count + expected_new))
            }
            Distribution::Latest => Chooser::Latest(SkewedLatest::new(shared.inserts.last_value())),
            Distribution::Uniform => Chooser::Uniform(Uniform::new(start, start + count - 1)),
            Distribution::Hotspot => {
                Chooser::Hotspot(Hotspot::new(start, start + count - 1, 0.2, 0.8))
            }
        };
        ThreadGen {
            rng: SmallRng::seed_from_u64(seed),
            ops: s.op_chooser(),
            scan_length: Uniform::new(1, s.max_scan_length),
            field: Uniform::new(0, shared.field_count as i64 - 1),
            chooser,
            shared,
        }
    }

    pub fn next_op(&mut self) -> Op {
        self.ops.next(&mut self.rng)
    }

    /// `nextKeynum()`: redraw while the key is beyond the last acknowledged insert.
    pub fn next_keynum(&mut self) -> i64 {
        loop {
            let last = self.shared.inserts.last_value();
            let k = match &mut self.chooser {
                Chooser::Zipfian(g) => g.next(&mut self.rng),
                Chooser::Latest(g) => g.next(&mut self.rng, last),
                Chooser::Uniform(g) => g.next(&mut self.rng),
                Chooser::Hotspot(g) => g.next(&mut self.rng),
            };
            // YCSB truncates to int here (`nextValue().intValue()`).
            let k = k as i32 as i64;
            if k <= last {
                return k;
            }
        }
    }

    pub fn key(&self, keynum: i64) -> String {
        key_name(keynum, self.shared.zero_padding)
    }

    pub fn scan_length(&mut self) -> i64 {
        self.scan_length.next(&mut self.rng)
    }

    pub fn field(&mut self) -> usize {
        self.field.next(&mut self.rng) as usize
    }

    /// The value to write into `field` of `key`: deterministic with data integrity on, else random.
    pub fn field_value(&mut self, key: &str, field: &str, out: &mut Vec<u8>) {
        if self.shared.data_integrity {
            out.extend_from_slice(&deterministic_value(key, field, self.shared.field_length));
        } else {
            self.value_into(out);
        }
    }

    /// A field value: `field_length` printable bytes (as YCSB's RandomByteIterator makes them).
    pub fn value_into(&mut self, out: &mut Vec<u8>) {
        let n = self.shared.field_length;
        out.reserve(n);
        let mut left = n;
        while left > 0 {
            let r: u64 = self.rng.random();
            for i in 0..left.min(8) {
                out.push(b' ' + ((r >> (i * 8)) as u8 % 95));
            }
            left -= left.min(8);
        }
    }

    pub fn shared(&self) -> &Shared {
        &self.shared
    }
}
