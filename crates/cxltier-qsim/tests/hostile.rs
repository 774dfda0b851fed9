//! Hostile and careless input: the parser must refuse it with the line, never panic, overflow
//! its stack or expand a program without bound.

use cxltier_qsim::{parse, Circuit, QsimError};
use proptest::prelude::*;

const HEAD: &str = "OPENQASM 2.0;\ninclude \"qelib1.inc\";\n";

/// The error's line and message; panics (failing the test) if the program parsed.
fn refused(src: &str) -> (usize, String) {
    match parse(src) {
        Err(QsimError::Parse { line, message }) => (line, message),
        Err(other) => panic!("expected a parse error, got {other}"),
        Ok(c) => panic!(
            "expected a parse error, parsed {} qubits and {} gates",
            c.num_qubits,
            c.gates.len()
        ),
    }
}

#[test]
fn register_sizes_are_bounded_before_anything_is_allocated() {
    for size in ["1e300", "1000000000000", "18446744073709551615", "64"] {
        let (line, msg) = refused(&format!("{HEAD}qreg q[{size}];\nh q;\n"));
        assert_eq!(line, 3, "{size}: {msg}");
        assert!(msg.contains("at most 63"), "{size}: {msg}");
    }
    // The bound is over all registers, so sizes cannot add up past it (or overflow).
    let (line, msg) = refused(&format!("{HEAD}qreg a[40];\nqreg b[40];\n"));
    assert_eq!(line, 4, "{msg}");
    let (line, _) = refused(&format!(
        "{HEAD}qreg a[63];\nqreg b[18446744073709551615];\n"
    ));
    assert_eq!(line, 4);
    // Classical registers too: measuring into one expands it bit by bit.
    let (line, msg) = refused(&format!(
        "{HEAD}qreg q[1];\ncreg c[1e300];\nmeasure q[0] -> c;\n"
    ));
    assert_eq!(line, 4, "{msg}");
    let c = parse(&format!("{HEAD}qreg a[60];\nqreg b[3];\nh b;\n")).unwrap();
    assert_eq!(c.num_qubits, 63);
}

#[test]
fn deep_expressions_are_refused_not_overflowing_the_stack() {
    let deep = [
        format!("{}1{}", "(".repeat(20_000), ")".repeat(20_000)),
        "-".repeat(200_000) + "1",
        "+".repeat(200_000) + "1",
        "2^".repeat(200_000) + "1",
        "sin(".repeat(20_000) + "1" + &")".repeat(20_000),
    ];
    for e in &deep {
        let (line, msg) = refused(&format!("{HEAD}qreg q[1];\n\nrz({e}) q[0];\n"));
        assert_eq!(line, 5, "{msg}");
        assert!(msg.contains("nested more than 256"), "{msg}");
        // Inside a definition as well.
        let (line, msg) = refused(&format!("{HEAD}qreg q[1];\ngate g a {{ rz({e}) a; }}\n"));
        assert_eq!(line, 4, "{msg}");
        assert!(msg.contains("nested more than 256"), "{msg}");
    }
    // Up to the limit is fine, and so is a long flat expression (no nesting at all).
    let ok = format!("{}pi{}", "(".repeat(200), ")".repeat(200));
    let c = parse(&format!("{HEAD}qreg q[1];\nrz({ok}) q[0];\n")).unwrap();
    assert_eq!(c.gates.len(), 1);
    let flat = vec!["1"; 200_000].join("+");
    let c = parse(&format!("{HEAD}qreg q[1];\nrz({flat}-200000) q[0];\n")).unwrap();
    assert_eq!(c.gates.len(), 1);
}

/// Definitions `g1 .. g{levels}`, each two calls of the one before; `g0` is `base`.
fn doubling(levels: usize, base: &str) -> String {
    let mut s = format!("{HEAD}qreg q[2];\ngate g0 a {{ {base} }}\n");
    for i in 1..=levels {
        s += &format!("gate g{i} a {{ g{} a; g{} a; }}\n", i - 1, i - 1);
    }
    s
}

#[test]
fn exponential_gate_expansion_is_refused_before_it_starts() {
    // 2^40 gates from a kilobyte of text: refused at the call, with its line and the limit.
    let src = doubling(40, "h a;") + "h q[1];\ng40 q[0];\n";
    let (line, msg) = refused(&src);
    assert_eq!(line, 46, "{msg}");
    assert!(
        msg.contains("1099511627776 gates") && msg.contains("limit of 1000000"),
        "{msg}"
    );
    // Definitions that expand to nothing still count: expanding them is work too.
    let src = doubling(60, "barrier a;") + "g60 q[0];\n";
    let (_, msg) = refused(&src);
    assert!(msg.contains("limit of 1000000"), "{msg}");
    // The limit is over the whole circuit: broadcasting and repetition add up.
    // (Definitions of barriers only, so that nothing is materialised.)
    let src = doubling(18, "barrier a;") + &"g18 q;\n".repeat(2);
    let (line, msg) = refused(&src);
    assert_eq!(line, 24, "{msg}");
    assert!(msg.contains("(524288 before it)"), "{msg}");
    // Below the limit, the expansion is exact.
    let c = parse(&(doubling(10, "h a;") + "g10 q;\n")).unwrap();
    assert_eq!(c.gates.len(), 2 << 10);
}

#[test]
fn definitions_nest_at_most_256_deep() {
    let mut src = format!("{HEAD}qreg q[1];\ngate g0 a {{ x a; }}\n");
    for i in 1..=300 {
        src += &format!("gate g{i} a {{ g{} a; }}\n", i - 1);
    }
    let (line, msg) = refused(&src);
    assert_eq!(line, 4 + 256, "{msg}");
    assert!(msg.contains("more than 256 deep"), "{msg}");
    let mut src = format!("{HEAD}qreg q[1];\ngate g0 a {{ x a; }}\n");
    for i in 1..=255 {
        src += &format!("gate g{i} a {{ g{} a; }}\n", i - 1);
    }
    let c = parse(&(src + "g255 q[0];\n")).unwrap();
    assert_eq!(c.gates.len(), 1);
}

#[test]
fn non_finite_parameters_are_errors_with_the_line() {
    for (e, needle) in [
        ("1/0", "division by zero"),
        ("-1/0", "division by zero"),
        ("pi/(1-1)", "division by zero"),
        ("0/0", "division by zero"),
        ("ln(0)", "not a finite number"),
        ("sqrt(-1)", "not a finite number"),
        ("exp(1000)", "not a finite number"),
        ("1e308*10", "not a finite number"),
        ("10^400", "not a finite number"),
        ("1e999", "too large"),
    ] {
        let (line, msg) = refused(&format!("{HEAD}qreg q[1];\n\nrz({e}) q[0];\n"));
        assert_eq!(line, 5, "{e}: {msg}");
        assert!(msg.contains(needle), "{e}: {msg}");
    }
    // Through a definition's parameter: the definition's statement is named.
    let (line, msg) = refused(&format!(
        "{HEAD}qreg q[1];\ngate g(t) a {{\n  rz(pi/t) a;\n}}\ng(0) q[0];\n"
    ));
    assert_eq!(line, 5, "{msg}");
    assert!(msg.contains("division by zero"), "{msg}");
    // Circuits built in code too.
    let mut c = Circuit::new(1);
    assert!(c.push("rz", &[f64::NAN], &[0]).is_err());
    assert!(c.push("rz", &[f64::INFINITY], &[0]).is_err());
    assert!(c.push("rz", &[1.0], &[0]).is_ok());
}

/// Words and symbols of OpenQASM, so that random programs get past the lexer and exercise the
/// parser's corners (definitions, broadcasting, measurement, expressions).
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "OPENQASM 2.0;",
            "include \"qelib1.inc\";",
            "qreg",
            "creg",
            "gate",
            "measure",
            "barrier",
            "reset",
            "opaque",
            "if",
            "h",
            "cx",
            "rz",
            "u3",
            "ccx",
            "c4x",
            "q",
            "c",
            "a",
            "b",
            "g",
            "t",
            "pi",
            "sin",
            "ln",
            "sqrt",
            ";",
            ",",
            "(",
            ")",
            "[",
            "]",
            "{",
            "}",
            "->",
            "+",
            "-",
            "*",
            "/",
            "^",
            "==",
            "\n",
            " ",
            "//",
            "\"",
        ])
        .prop_map(str::to_string),
        (0u64..70).prop_map(|n| n.to_string()),
        prop::sample::select(vec!["1e300", "0.5", "1e999", ".5", "1.2.3", "1e", "0"])
            .prop_map(str::to_string),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Arbitrary text never panics the parser.
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
        let _ = parse(&format!("{HEAD}{text}"));
    }

    /// Programs made of OpenQASM's own tokens never panic it, and what parses is consistent:
    /// every gate's qubits are declared and distinct, and every parameter was finite.
    #[test]
    fn token_soup_never_panics(tokens in prop::collection::vec(token(), 0..120)) {
        let text = format!("{HEAD}qreg q[3];\ncreg c[3];\n{}", tokens.join(" "));
        if let Ok(c) = parse(&text) {
            prop_assert!(c.num_qubits <= 63);
            for g in &c.gates {
                prop_assert!(g.qubits.iter().all(|&q| q < c.num_qubits));
                prop_assert!(g.matrix.entries().iter().all(|z| z.re.is_finite() && z.im.is_finite()));
            }
        }
    }
}
