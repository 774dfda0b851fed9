//! Hostile and careless input: the parser must refuse it with the line, never panic, overflow
//! its stack or expand a program without bound.

use cxltier_qsim::qasm::{KEPT_BYTES_MIN, MAX_STATEMENT_BYTES};
use cxltier_qsim::{parse, parse_reader, Circuit, ParseOptions, QsimError};
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

/// A program made as it is read: `head`, then `body` over and over, `len` bytes in all (far more
/// than any test could hold), counting the bytes handed out.
struct Generated {
    head: Vec<u8>,
    body: Vec<u8>,
    len: u64,
    given: u64,
}

impl Generated {
    fn new(head: &str, body: &str, len: u64) -> Generated {
        Generated {
            head: head.as_bytes().to_vec(),
            body: body.as_bytes().to_vec(),
            len,
            given: 0,
        }
    }
}

impl std::io::Read for Generated {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() && self.given < self.len {
            let at = self.given as usize;
            buf[n] = if at < self.head.len() {
                self.head[at]
            } else {
                self.body[(at - self.head.len()) % self.body.len()]
            };
            n += 1;
            self.given += 1;
        }
        Ok(n)
    }
}

const GIGABYTE: u64 = 1 << 30;

/// Parse a generated gigabyte under `options`: the error, and the bytes read before it.
fn refused_early(head: &str, body: &str, options: &ParseOptions) -> (usize, String, u64) {
    let mut input = Generated::new(head, body, GIGABYTE);
    match parse_reader(&mut input, options) {
        Err(QsimError::Parse { line, message }) => (line, message, input.given),
        Err(other) => panic!("expected a parse error, got {other}"),
        Ok(c) => panic!("a gigabyte parsed to {} gates", c.gates.len()),
    }
}

#[test]
fn a_file_far_past_the_gate_cap_is_refused_after_a_bounded_prefix() {
    // What the parser holds grows with what it keeps (the gates up to the cap), not with the
    // file: a gigabyte of gates is refused having read little more than the gates it kept.
    let line = "cx q[0],q[1];\n";
    let head = format!("{HEAD}qreg q[2];\n");
    let slack = 1 << 20;
    let (at, msg, read) = refused_early(&head, line, &ParseOptions::new());
    assert_eq!(at, 1_000_004, "{msg}");
    assert!(msg.contains("limit of 1000000 gates"), "{msg}");
    let kept = head.len() as u64 + 1_000_000 * line.len() as u64;
    assert!(read < kept + slack, "read {read} bytes to keep {kept}");
    // The cap is an option, and the bound follows it.
    let options = ParseOptions::new().max_gates(1000);
    let (at, msg, read) = refused_early(&head, line, &options);
    assert_eq!(at, 1004, "{msg}");
    assert!(msg.contains("limit of 1000 gates"), "{msg}");
    assert!(read < 1000 * line.len() as u64 + slack, "read {read}");
    // All on one line, as some generators write.
    let (at, msg, read) = refused_early(&head, "h q[0]; ", &options);
    assert_eq!(at, 4, "{msg}");
    assert!(read < 1000 * 8 + slack, "read {read}");
    // Measurements and resets are kept as gates are, and count against the cap with them.
    let (_, msg, read) = refused_early(
        &format!("{HEAD}qreg q[2];\ncreg c[2];\n"),
        "measure q[0] -> c[0];\nreset q[1];\n",
        &options,
    );
    assert!(msg.contains("limit of 1000"), "{msg}");
    assert!(read < 500 * 33 + slack, "read {read}");
    // OpenQASM 3 is rewritten line by line as it is read, not as a whole.
    let (at, msg, read) = refused_early(
        "OPENQASM 3.0;\ninclude \"stdgates.inc\";\nqubit[2] q;\n",
        "cx q[0], q[1];\n",
        &options,
    );
    assert_eq!(at, 1004, "{msg}");
    assert!(read < 1000 * 15 + slack, "read {read}");
}

#[test]
fn statements_and_declarations_are_bounded_as_they_are_read() {
    let options = ParseOptions::new().max_gates(1000);
    let slack = 1 << 20;
    // One endless name, expression or line: refused once it passes a statement's bound.
    for (head, body) in [
        (format!("{HEAD}qreg q[1];\nh "), "q"),
        (format!("{HEAD}qreg q[1];\nrz("), "1+"),
        (format!("{HEAD}qreg q[1];\nbarrier "), "q,"),
        (format!("{HEAD}gate g a {{ "), "x a; "),
        // OpenQASM 3 is rewritten a line at a time: a line is bounded as a statement is.
        ("OPENQASM 3.0;\nqubit[1] q;\n".to_string(), "x q[0]; "),
    ] {
        let (line, msg, read) = refused_early(&head, body, &options);
        assert!(msg.contains("longer than"), "{body}: {msg}");
        let at = head.lines().count() + usize::from(head.ends_with('\n'));
        assert_eq!(line, at, "{body}: {msg}");
        // Spaces are not counted (they cost nothing to skip): these are at most half spaces.
        assert!(
            read < 2 * MAX_STATEMENT_BYTES as u64 + slack,
            "{body}: read {read}"
        );
    }
    // Registers and definitions are kept too: endless declarations of them are refused before
    // they take more than the gates the cap allows would (or a floor for a low cap).
    let mut names = 0u64;
    let mut input = std::iter::from_fn(move || {
        names += 1;
        Some(format!("creg c{names}[0];\ngate g{names} a {{ x a; }}\n"))
    })
    .flat_map(String::into_bytes);
    let mut read = 0u64;
    let reader = std::io::BufReader::new(ReadIter(&mut input, &mut read));
    match parse_reader(reader, &options) {
        Err(QsimError::Parse { message, .. }) => {
            assert!(
                message.contains("registers and gate definitions"),
                "{message}"
            )
        }
        other => panic!("endless declarations: {other:?}"),
    }
    // Each is charged several times its bytes (32 per token), up to the least limit of what
    // they may take, which a low gate limit leaves them.
    assert!(read < KEPT_BYTES_MIN / 4 + slack, "read {read}");
}

/// A reader over an iterator of bytes, counting them.
struct ReadIter<'a, I>(&'a mut I, &'a mut u64);

impl<I: Iterator<Item = u8>> std::io::Read for ReadIter<'_, I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        for (slot, b) in buf.iter_mut().zip(&mut *self.0) {
            *slot = b;
            n += 1;
        }
        *self.1 += n as u64;
        Ok(n)
    }
}

#[test]
fn a_program_read_in_pieces_parses_as_a_whole() {
    // A reader that hands out one byte at a time puts every token across a read's boundary.
    struct Trickle<'a>(&'a [u8]);
    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some((&b, rest)) = self.0.split_first() else {
                return Ok(0);
            };
            if buf.is_empty() {
                return Ok(0);
            }
            buf[0] = b;
            self.0 = rest;
            Ok(1)
        }
    }
    let programs = [
        format!(
            "// a comment first\n\n{HEAD}qreg a[2];\ncreg c[2];\ngate my(t) x, y {{ rz(-t/2) x; \
             cx x, y; }}\nh a; // the rest of a line\nmy(pi*2^-1) a[1], a[0];\n\
             measure a[0]->c[0];\nif(c==1) x a[1];\nmeasure a -> c;\n"
        ),
        "\n  // header below\nOPENQASM 3.0;\ninclude \"stdgates.inc\";\nbit[2] c;\nqubit[2] q;\n\
         h q[0];\nc[0] = measure q[0];\nif (c[0]) {\n  x q[1];\n} else {\n  phase(0.5) q[1];\n}\n\
         reset q[0];\r\ncphase(.25e1) q[0], q[1];\n"
            .to_string(),
    ];
    for src in &programs {
        let whole = parse(src).unwrap();
        let pieces = parse_reader(Trickle(src.as_bytes()), &ParseOptions::new()).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{pieces:?}"));
        assert!(!whole.instructions.is_empty());
    }
    // Errors keep their lines.
    let src = format!("{HEAD}qreg q[1];\n\nh q[0];\nfoo q[0];\n");
    match parse_reader(Trickle(src.as_bytes()), &ParseOptions::new()) {
        Err(QsimError::Parse { line, .. }) => assert_eq!(line, 6),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_failed_read_is_an_error_with_its_line() {
    struct Failing(usize);
    impl std::io::Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let text = b"OPENQASM 2.0;\nqreg q[1];\nh q[0];\n";
            if self.0 >= text.len() {
                return Err(std::io::Error::other("the disk is gone"));
            }
            let n = buf.len().min(text.len() - self.0);
            buf[..n].copy_from_slice(&text[self.0..self.0 + n]);
            self.0 += n;
            Ok(n)
        }
    }
    match parse_reader(Failing(0), &ParseOptions::new()) {
        Err(e @ QsimError::Read { line: 4, .. }) => {
            assert!(e.to_string().contains("the disk is gone"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn absurd_sizes_and_indices_are_reported_as_written() {
    for size in ["1e300", "99999999999999999999999", "18446744073709551616"] {
        let (line, msg) = refused(&format!("{HEAD}qreg q[{size}];\n"));
        assert_eq!(line, 3, "{msg}");
        assert!(msg.contains(&format!("of {size} qubits")), "{size}: {msg}");
        assert!(!msg.contains("18446744073709551615"), "{size}: {msg}");
        let (_, msg) = refused(&format!("{HEAD}qreg q[2];\nh q[{size}];\n"));
        assert!(msg.contains(&format!("q[{size}] is out of range")), "{msg}");
        let (_, msg) = refused(&format!(
            "{HEAD}qreg q[1];\ncreg c[70];\nif(c=={size}) x q[0];\n"
        ));
        assert!(msg.contains(&format!("if(c=={size})")), "{msg}");
        assert!(!msg.contains("18446744073709551615"), "{size}: {msg}");
    }
}
