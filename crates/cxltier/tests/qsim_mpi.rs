//! `mpirun -np R cxltier qsim ...` (feature `mpi`): random, QFT and Ising circuits of 10 to 16
//! qubits over 1, 2, 4 and (up to 13 qubits) 8 ranks (oversubscribed), in memory and out of core per rank, give the
//! single-process run's amplitudes within 1e-12 (and `tests/qsim.rs`, with the library's Aer
//! tests, ties the single-process run to Aer); sampled counts, also of dynamic circuits (mid-circuit
//! measurements, resets, conditions), are the single-process run's draw for the same seed; `--json` conforms to docs/json/qsim.schema.json
//! with `ranks` and `distribution`; the gates inside one chunk after an exchange overlap it (and
//! the cluster model plans as many); a number of ranks that is not a power of two, a rank that
//! cannot set up its part, and a rank killed mid-run end every rank with a message naming the
//! rank and the cause.
//!
//! Needs Open MPI's `mpirun` (scripts/deps installs it); without it the tests say so and pass.

#![cfg(feature = "mpi")]

// The library's tests against Aer: the circuits they share.
#[path = "../../cxltier-qsim/tests/common/mod.rs"]
mod qsim_common;
mod util;
use qsim_common::{qft, HEADER};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output};
use util::{assert_conforms as assert_conforms_to, json_of, stderr, BIN};

fn have_mpirun() -> bool {
    let found = Command::new("mpirun").arg("--version").output().is_ok();
    if !found {
        eprintln!("skipped: no mpirun on PATH (scripts/deps installs Open MPI)");
    }
    found
}

/// `cxltier qsim ARGS` over `ranks` ranks (1 runs without mpirun, as a plain run).
fn qsim(ranks: usize, args: &[&str]) -> Output {
    qsim_command(ranks, args).output().expect("run cxltier")
}

/// The command [`qsim`] runs.
fn qsim_command(ranks: usize, args: &[&str]) -> Command {
    let mut cmd = if ranks == 1 {
        Command::new(BIN)
    } else {
        let mut c = Command::new("mpirun");
        // Two cores on the test machine: oversubscribe; root in CI containers.
        c.args(["--oversubscribe", "-np", &ranks.to_string(), BIN])
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            // Shared memory without cross-memory attach: a container that forbids
            // process_vm_readv between ranks would fail every exchange, and the tests check
            // results, not speed.
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
        c
    };
    cmd.arg("qsim").args(args).arg("--threads").arg("1");
    cmd
}

/// `cxltier qsim ARGS` over `ranks` ranks, which must fail: its stderr.
fn refused(ranks: usize, args: &[&str]) -> String {
    let out = qsim(ranks, args);
    assert!(!out.status.success(), "{ranks} ranks, {args:?} ran");
    stderr(&out)
}

fn json_run(ranks: usize, args: &[&str]) -> Value {
    json_of(format!("{ranks} ranks, {args:?}"), &qsim(ranks, args))
}

/// The circuit `text` written to `dir`/`name`: its path.
fn circuit_file(dir: &Path, name: &str, text: &str) -> String {
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file.to_str().unwrap().to_string()
}

/// The amplitudes at `indices` of the single-process run of `file`.
fn single_amplitudes(file: &str, indices: &str) -> Vec<(String, f64, f64)> {
    amplitudes(&json_run(1, &[file, "--amplitudes", indices, "--json"]))
}

/// Asserts that the amplitudes of the run `doc` (`what`, in a message) are `expected`, index for
/// index, within 1e-12.
fn assert_amplitudes(what: &str, doc: &Value, expected: &[(String, f64, f64)]) {
    for ((k, re, im), (k1, re1, im1)) in amplitudes(doc).iter().zip(expected) {
        assert_eq!(k, k1, "{what}");
        assert!(
            (re - re1).abs() < 1e-12 && (im - im1).abs() < 1e-12,
            "{what}, amplitude {k}: ({re}, {im}) against ({re1}, {im1})"
        );
    }
}

fn ising(n: usize, steps: usize) -> String {
    let mut s = format!("{HEADER}qreg q[{n}];\nh q;\n");
    for step in 0..steps {
        for q in 0..n {
            writeln!(
                s,
                "rzz({}) q[{q}],q[{}];",
                0.3 + 0.01 * step as f64,
                (q + 1) % n
            )
            .unwrap();
        }
        writeln!(s, "rx(0.7) q;").unwrap();
    }
    s
}

/// A seeded random circuit of one-, two- and three-qubit gates (a small LCG: the test needs no
/// generator crate).
fn random(n: usize, gates: usize, seed: u64) -> String {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % bound
    };
    let mut s = format!("{HEADER}qreg q[{n}];\n");
    for _ in 0..gates {
        let a = next(n);
        let b = (a + 1 + next(n - 1)) % n;
        let mut c = next(n);
        while c == a || c == b {
            c = next(n);
        }
        let angle = next(6283) as f64 / 1000.0 - 3.1;
        match next(6) {
            0 => writeln!(s, "u3({angle},{},{}) q[{a}];", angle / 2.0, -angle),
            1 => writeln!(s, "h q[{a}];"),
            2 => writeln!(s, "cx q[{a}],q[{b}];"),
            3 => writeln!(s, "crx({angle}) q[{a}],q[{b}];"),
            4 => writeln!(s, "rxx({angle}) q[{a}],q[{b}];"),
            _ => writeln!(s, "ccx q[{a}],q[{b}],q[{c}];"),
        }
        .unwrap();
    }
    s
}

/// A circuit on `n` qubits over `2^g` ranks whose exchange is followed by gates inside one chunk
/// of every rank's array: rotations on the local qubits, a Hadamard on each global one (the
/// exchange), then a chain of rotations and CNOTs on qubits 0 to `chain`. The local qubits sent
/// out are the lowest ones above the chain (none is used again), so that with a short chain the
/// global qubits come in inside a chunk (the whole batch goes into the exchange, which saves its
/// trip through the part), and with a chain up to the chunk's top qubit they come in above it
/// (the chain goes into the exchange, which leaves some chunks in no partner's set, and in memory
/// the rest of the batch takes fewer sweeps than the whole).
fn overlap(n: usize, g: usize, chain: usize) -> String {
    let m = n - g;
    let mut s = format!("{HEADER}qreg q[{n}];\n");
    for q in 0..m {
        let q = q as f64;
        writeln!(
            s,
            "u3({},{},{}) q[{q}];",
            0.1 + 0.07 * q,
            0.2 * q,
            0.05 * q - 0.3
        )
        .unwrap();
    }
    for q in m..n {
        writeln!(s, "h q[{q}];").unwrap();
    }
    for q in 0..chain {
        writeln!(s, "u3({},0.3,0.1) q[{q}];", 0.4 + 0.1 * q as f64).unwrap();
        writeln!(s, "cx q[{q}],q[{}];", q + 1).unwrap();
    }
    s
}

/// Indices spread over the whole state (every rank's part), low and high bits both varying.
fn spread_indices(n: usize) -> String {
    let stride = (1u64 << n) / 64;
    (0..64u64)
        .flat_map(|i| [i * stride, i * stride + (i * 7919) % stride.max(1)])
        .chain([(1u64 << n) - 1])
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn amplitudes(doc: &Value) -> Vec<(String, f64, f64)> {
    doc["amplitudes"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v[0].as_f64().unwrap(), v[1].as_f64().unwrap()))
        .collect()
}

fn assert_conforms(doc: &Value) {
    assert_conforms_to("qsim.schema.json", doc);
}

#[test]
fn ranks_give_the_single_process_amplitudes() {
    let Some((dir, _)) = mpi_scratch() else {
        return;
    };
    let circuits = [
        ("qft", 14, qft(14)),
        ("qft", 16, qft(16)),
        ("ising", 12, ising(12, 3)),
        ("random", 10, random(10, 150, 1)),
        ("random", 13, random(13, 200, 2)),
    ];
    for (name, n, text) in &circuits {
        let file = circuit_file(dir.path(), &format!("{name}{n}.qasm"), text);
        let file = file.as_str();
        let indices = spread_indices(*n);
        let base = [file, "--amplitudes", &indices, "--json"];
        let single = json_run(1, &base);
        assert!(single.get("ranks").is_none(), "one rank runs as before");
        let expected = amplitudes(&single);
        // Eight ranks (four to a core here) only on the smaller circuits, to keep the test short.
        let rank_counts: &[usize] = if *n <= 13 { &[2, 4, 8] } else { &[2, 4] };
        for &ranks in rank_counts {
            let doc = json_run(ranks, &base);
            assert_conforms(&doc);
            assert_eq!(doc["ranks"], ranks, "{name}{n}");
            assert_eq!(doc["qubits"], *n as u64);
            let dist = &doc["distribution"];
            assert_eq!(dist["rank_timings"].as_array().unwrap().len(), ranks);
            assert!(
                dist["exchanges"].as_u64().unwrap() >= 1,
                "{name}{n}: {dist}"
            );
            assert!(
                dist["exchanges"].as_u64() <= dist["naive_exchanges"].as_u64(),
                "{dist}"
            );
            let norm = doc["norm"].as_f64().unwrap();
            assert!(
                (norm - 1.0).abs() < 1e-12,
                "{name}{n} on {ranks}: norm {norm}"
            );
            assert_amplitudes(&format!("{name}{n} on {ranks} ranks"), &doc, &expected);
        }
    }
}

#[test]
fn out_of_core_ranks_give_the_single_process_amplitudes() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    let file = circuit_file(dir.path(), "qft15.qasm", &qft(15));
    let file = file.as_str();
    let indices = spread_indices(15);
    let expected = single_amplitudes(file, &indices);
    // Parts of 256 KiB (2 ranks) and 128 KiB (4 ranks), each under a limit of half its size:
    // the limit applies per rank, and every rank spills to its own file.
    for (ranks, limit) in [(2, "128K"), (4, "64K")] {
        let doc = json_run(
            ranks,
            &[
                file,
                "--amplitudes",
                &indices,
                "--memory-limit",
                limit,
                "--ssd",
                spill,
                "--json",
            ],
        );
        assert_conforms(&doc);
        assert_eq!(doc["mode"], "out_of_core", "{ranks} ranks under {limit}");
        assert_amplitudes(&format!("{ranks} ranks out of core"), &doc, &expected);
    }
    // Spill files are unlinked when opened: nothing is left in the directory.
    assert_eq!(std::fs::read_dir(spill).unwrap().count(), 0);
}

/// The counts of a `--json` run.
fn counts(doc: &Value) -> &serde_json::Map<String, Value> {
    doc["counts"].as_object().expect("counts")
}

/// A dynamic circuit over `n` qubits (at least 4): random layers, then mid-circuit measurements
/// of the top and a low qubit with conditioned corrections, a reset, and every qubit measured.
fn dynamic(n: usize, seed: u64) -> String {
    let top = n - 1;
    let mut s = random(n, 8 * n, seed);
    s = s.replacen(
        &format!("qreg q[{n}];\n"),
        &format!("qreg q[{n}];\ncreg a[2];\ncreg c[{n}];\n"),
        1,
    );
    writeln!(
        s,
        "measure q[{top}] -> a[0];\nif(a==1) x q[3];\nmeasure q[2] -> a[1];\nreset q[{top}];\n\
         if(a==2) h q[{}];\nh q[{top}];\ncx q[{top}],q[1];\nrx(0.7) q[0];\nry(1.1) q[{top}];\n\
         measure q -> c;",
        n - 2
    )
    .unwrap();
    s
}

#[test]
fn sampled_counts_over_ranks_are_the_single_process_draw() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    let n = 14;
    let mut measured = random(n, 220, 9);
    measured = measured.replacen(
        &format!("qreg q[{n}];\n"),
        &format!("qreg q[{n}];\ncreg c[{n}];\n"),
        1,
    );
    measured.push_str("measure q -> c;\n");
    let file = circuit_file(dir.path(), "random14.qasm", &measured);
    let file = file.as_str();
    let base = [file, "--shots", "3000", "--seed", "11", "--json"];
    let single = json_run(1, &base);
    let expected = counts(&single);
    // Spread over many outcomes: a draw that differed would show.
    assert!(expected.len() > 500, "{}", expected.len());
    assert_eq!(
        expected.values().map(|v| v.as_u64().unwrap()).sum::<u64>(),
        3000
    );
    // In memory over 2, 4 and 8 ranks, out of core in one process and over 2 ranks: the same
    // shots, whatever layout each run ended in.
    let ooc = [
        "--memory-limit",
        "96K",
        "--ssd",
        spill,
        "--shots",
        "3000",
        "--seed",
        "11",
        "--json",
    ];
    let runs = [
        (2, &base[..]),
        (4, &base[..]),
        (8, &base[..]),
        (1, &[&[file][..], &ooc[..]].concat()[..]),
        (2, &[&[file][..], &ooc[..]].concat()[..]),
    ];
    for (ranks, args) in runs {
        let doc = json_run(ranks, args);
        if args.len() > base.len() {
            assert_eq!(doc["mode"], "out_of_core", "{ranks} ranks, {args:?}");
        }
        assert_eq!(counts(&doc), expected, "{ranks} ranks, {args:?}");
    }
    // Another seed, another draw.
    let other = json_run(2, &[file, "--shots", "3000", "--seed", "12", "--json"]);
    assert_ne!(counts(&other), expected);
}

#[test]
fn dynamic_circuits_over_ranks_give_the_single_process_counts() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    let n = 14;
    let file = circuit_file(dir.path(), "dynamic14.qasm", &dynamic(n, 4));
    let file = file.as_str();
    for method in ["branches", "trajectories"] {
        let shots = if method == "branches" { "2000" } else { "200" };
        let base = [
            file,
            "--shots",
            shots,
            "--seed",
            "5",
            "--dynamic-method",
            method,
            "--json",
        ];
        let single = json_run(1, &base);
        assert_eq!(single["dynamic"]["method"], method);
        let expected = counts(&single);
        assert!(expected.len() > 50, "{method}: {}", expected.len());
        // Keys in Qiskit's form: the last register first, a space between registers.
        assert!(expected
            .keys()
            .all(|k| k.len() == n + 3 && k.as_bytes()[n] == b' '));
        let ooc = [&base[..], &["--memory-limit", "96K", "--ssd", spill][..]].concat();
        for (ranks, args) in [(2, &base[..]), (4, &base[..]), (2, &ooc[..])] {
            let doc = json_run(ranks, args);
            assert_conforms(&doc);
            assert_eq!(doc["ranks"], ranks);
            assert_eq!(doc["dynamic"]["method"], method, "{ranks} ranks");
            assert!(doc["distribution"]["exchanges"].as_u64().unwrap() >= 1);
            if args.len() > base.len() {
                assert_eq!(doc["mode"], "out_of_core", "{ranks} ranks, {args:?}");
            }
            assert_eq!(
                counts(&doc),
                expected,
                "{method} on {ranks} ranks, {args:?}"
            );
        }
    }
    // A dynamic circuit has no state vector to read amplitudes from, over ranks as in one
    // process: the same refusal, naming the line.
    let stderr = refused(2, &[file, "--amplitudes", "0"]);
    assert!(
        stderr.contains("dynamic") && stderr.contains("--shots"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(spill).unwrap().count(), 0);
}

#[test]
fn bad_rank_counts_and_failed_ranks_end_every_rank_with_the_cause() {
    let Some((dir, _)) = mpi_scratch() else {
        return;
    };
    let file = circuit_file(dir.path(), "qft12.qasm", &qft(12));
    let file = file.as_str();
    let stderr = refused(3, &[file]);
    assert!(stderr.contains("mpirun -np 3"), "{stderr}");
    assert!(stderr.contains("power of two"), "{stderr}");
    // Spill space far too small for a rank's part: the rank names itself and the cause, and
    // every rank ends (the run does not hang). Parts of 256 KiB under a limit of 128 KiB.
    let big = dir.path().join("qft15.qasm");
    std::fs::write(&big, qft(15)).unwrap();
    let spill = format!("{}:16K", dir.path().display());
    let stderr = refused(
        2,
        &[
            big.to_str().unwrap(),
            "--memory-limit",
            "128K",
            "--ssd",
            &spill,
        ],
    );
    assert!(
        stderr.contains("rank 0 of 2") || stderr.contains("rank 1 of 2"),
        "{stderr}"
    );
    assert!(stderr.contains("available"), "{stderr}");
}

#[test]
fn exchanges_cut_into_many_small_messages_give_the_single_process_amplitudes() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    let random13 = circuit_file(dir.path(), "random13.qasm", &random(13, 200, 5));
    let random13 = random13.as_str();
    let qft15 = circuit_file(dir.path(), "qft15.qasm", &qft(15));
    let qft15 = qft15.as_str();
    // Messages of 64 bytes (4 amplitudes): an exchange is hundreds of messages, most chunks
    // several, so the pipeline's every stage (a chunk read, held over messages, written back)
    // runs, in memory and out of core (parts of 256 KiB under 128K).
    for (file, n, ranks, extra) in [
        (random13, 13, 2, &[][..]),
        (random13, 13, 4, &[][..]),
        (
            qft15,
            15,
            2,
            &["--memory-limit", "128K", "--ssd", spill][..],
        ),
    ] {
        let indices = spread_indices(n);
        let expected = single_amplitudes(file, &indices);
        let mut args = vec![
            file,
            "--amplitudes",
            &indices,
            "--exchange-message",
            "64",
            "--json",
        ];
        args.extend_from_slice(extra);
        let doc = json_run(ranks, &args);
        assert_conforms(&doc);
        let dist = &doc["distribution"];
        // Each message carries 64 bytes each way: the count is the planned volume over 64.
        let bytes = dist["exchange_bytes_per_rank"].as_u64().unwrap();
        for timing in dist["rank_timings"].as_array().unwrap() {
            assert_eq!(timing["messages"].as_u64().unwrap(), bytes / 64, "{dist}");
        }
        assert_amplitudes(&format!("{ranks} ranks {extra:?}"), &doc, &expected);
    }
    // Smaller than one amplitude: refused, naming the option and the least size.
    let stderr = refused(2, &[random13, "--exchange-message", "8"]);
    assert!(
        stderr.contains("--exchange-message 8") && stderr.contains("16 or more"),
        "{stderr}"
    );
}

/// The batch after an exchange overlaps it where that saves a trip through the part: its gates
/// inside one chunk are applied by the exchange (as it writes each chunk back after its last
/// partner, and to the chunks no partner touches while messages are in flight), which every rank
/// reports, and the amplitudes are the single-process run's: in memory (one chunk a part; two
/// over 2 ranks, and four over 4, one of which no partner's set falls in) and out of core (many
/// chunks), over 2 and 4 ranks.
#[test]
fn exchanges_overlap_the_next_batch_s_in_chunk_gates() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    let out_of_core = ["--memory-limit", "128K", "--ssd", spill];
    // In memory a part of 14 qubits is one chunk, of 18 two and of 19 four (of 17 qubits, of
    // which sweeps keep 10 or 11 in place and gather 6); out of core under 128K, chunks of 9
    // qubits. Out of core only a batch wholly inside a chunk saves a pass (the passes gather
    // the qubits above a chunk only).
    for (name, n, g, text, extra) in [
        ("qft", 15, 1, qft(15), &[][..]),
        ("overlap", 15, 1, overlap(15, 1, 3), &[][..]),
        ("overlap", 19, 1, overlap(19, 1, 16), &[][..]),
        ("overlap", 15, 1, overlap(15, 1, 3), &out_of_core[..]),
        ("overlap", 16, 2, overlap(16, 2, 3), &out_of_core[..]),
        ("overlap", 21, 2, overlap(21, 2, 16), &[][..]),
    ] {
        let path = format!("{name}{n}-{g}-{}.qasm", extra.len());
        let file = circuit_file(dir.path(), &path, &text);
        let file = file.as_str();
        let indices = spread_indices(n);
        let expected = single_amplitudes(file, &indices);
        let mut args = vec![file, "--amplitudes", &indices, "--json"];
        args.extend_from_slice(extra);
        let ranks = 1 << g;
        let doc = json_run(ranks, &args);
        assert_conforms(&doc);
        let what = format!("{name}{n} on {ranks} ranks {extra:?}");
        if !extra.is_empty() {
            assert_eq!(doc["mode"], "out_of_core", "{what}");
        }
        let dist = &doc["distribution"];
        for timing in dist["rank_timings"].as_array().unwrap() {
            assert!(
                timing["overlapped_gates"].as_u64().unwrap() > 0,
                "{what}: {dist}"
            );
            assert!(
                timing["overlap_seconds"].as_f64().unwrap() > 0.0,
                "{what}: {dist}"
            );
        }
        assert_amplitudes(&what, &doc, &expected);
    }
    assert_eq!(std::fs::read_dir(spill).unwrap().count(), 0);
}

/// A scratch directory and a fresh spill directory `spill` inside it (as a path string for
/// `--ssd`); `None` without mpirun (the test says so and passes).
fn mpi_scratch() -> Option<(tempfile::TempDir, String)> {
    if !have_mpirun() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("spill");
    std::fs::create_dir(&spill).unwrap();
    Some((dir, spill.to_str().unwrap().to_string()))
}

/// The cluster model's plan is the run's: the exchanges, the bytes each rank sends, the gates
/// the exchanges overlap and the passes out of core it predicts are those a run over the same
/// ranks reports (its times are a
/// benchmark's business, bench/qsim-cluster-model). `--bench-network` measures what it is given.
#[test]
fn the_cluster_model_plans_what_the_run_does() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    let spill = spill.as_str();
    for (name, n, text) in [
        ("qft", 15, qft(15)),
        ("random", 14, random(14, 200, 3)),
        ("overlap", 15, overlap(15, 1, 3)),
        ("overlap", 16, overlap(16, 2, 3)),
    ] {
        let file = circuit_file(dir.path(), &format!("{name}{n}.qasm"), &text);
        let file = file.as_str();
        for (ranks, limit) in [(2, None), (4, None), (2, Some("96K"))] {
            let mut args = vec![file, "--json"];
            let mut spec = format!("ranks={ranks},nodes=1,cores=2,threads=1,network=1G");
            if let Some(limit) = limit {
                args.extend(["--memory-limit", limit, "--ssd", spill]);
                spec.push_str(",ssd=1G");
            }
            let run = json_run(ranks, &args);
            let planned = [&args[..], &["--plan-cluster", &spec]].concat();
            let model = json_run(1, &planned);
            assert_conforms_to("qsim-plan-cluster.schema.json", &model);
            let what = format!("{name}{n} on {ranks} ranks, limit {limit:?}");
            let dist = &run["distribution"];
            assert_eq!(model["exchanges"], dist["exchanges"], "{what}");
            assert_eq!(
                model["exchange_bytes_per_rank"], dist["exchange_bytes_per_rank"],
                "{what}"
            );
            assert_eq!(model["naive_exchanges"], dist["naive_exchanges"], "{what}");
            let sent: u64 = dist["rank_timings"][0]["messages"].as_u64().unwrap();
            assert_eq!(model["messages_per_rank"].as_u64().unwrap(), sent, "{what}");
            let overlapped = &dist["rank_timings"][0]["overlapped_gates"];
            assert_eq!(&model["overlapped_gates"], overlapped, "{what}");
            if limit.is_some() {
                assert_eq!(run["mode"], "out_of_core");
                assert_eq!(model["mode"], "out_of_core");
                assert_eq!(model["passes"], run["passes"], "{what}");
            }
        }
    }
    let net = json_run(
        2,
        &["--bench-network", "--exchange-message", "64K", "--json"],
    );
    assert_conforms_to("qsim-bench-network.schema.json", &net);
    assert_eq!(net["ranks"], 2);
    assert_eq!(net["message_bytes"], 64 << 10);
    assert!(net["bytes_per_second"].as_f64().unwrap() > 0.0);
}

/// Processes whose command line names `needle` and whose environment says they are MPI rank
/// `rank`.
fn ranks_running(needle: &str, rank: usize) -> Vec<u32> {
    let want = format!("OMPI_COMM_WORLD_RANK={rank}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            String::from_utf8_lossy(&read("cmdline")).contains(needle)
                && read("environ")
                    .split(|&b| b == 0)
                    .any(|kv| kv == want.as_bytes())
        })
        .collect()
}

/// A rank that dies mid-run (killed, as the OOM killer would) ends every rank, and mpirun names
/// the rank and the signal; the spill files, unlinked when opened, are gone with the processes.
#[test]
fn a_rank_killed_mid_run_ends_every_rank_naming_it() {
    let Some((dir, spill)) = mpi_scratch() else {
        return;
    };
    // Minutes of work: the test kills rank 1 long before it could end.
    let file = circuit_file(dir.path(), "endless17.qasm", &random(17, 400_000, 11));
    let file = file.as_str();
    let mut child = qsim_command(2, &[file, "--memory-limit", "512K", "--ssd", &spill])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start mpirun");
    let started = std::time::Instant::now();
    let victim = loop {
        if let Some(&pid) = ranks_running(file, 1).first() {
            break pid;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before rank 1 was seen"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "rank 1 never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let killed = Command::new("kill")
        .args(["-9", &victim.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // mpirun ends every rank within seconds; a run that hangs fails the test, not the suite.
    let ended = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if ended.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the other rank still runs a minute after rank 1 was killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1") && stderr.contains("signal 9"),
        "{stderr}"
    );
    assert!(ranks_running(file, 0).is_empty() && ranks_running(file, 1).is_empty());
    assert_eq!(std::fs::read_dir(&spill).unwrap().count(), 0);
}
