//! OpenQASM 2.0: a lexer, a parser and the standard `qelib1.inc` gates, turning a program into a
//! flat list of unitary gates on numbered qubits. Every error names the line. A program is read
//! as it is parsed ([`parse_reader`]): a statement at a time, each expanded before the next is
//! read, within bounds ([`ParseOptions`], [`MAX_STATEMENT_BYTES`]) that hold what parsing keeps
//! to what the circuit may be, however large the file.
//!
//! Supported: `OPENQASM 2.0;` (a program without it is read as Qiskit reads it, with a warning in
//! [`Circuit::warnings`]), `include "qelib1.inc";` (the gates are built in; no other include),
//! `qreg`/`creg` (several of each; qubits are numbered in declaration order, as Qiskit does),
//! the built-in `U` and `CX`, every gate of Qiskit's qelib1 and reader in [`STANDARD_GATES`],
//! Qiskit's other standard gates in [`EXTRA_GATES`] (a program's definition of one wins), user `gate`
//! definitions (expanded at each use), register broadcasting (`h q;`, `cx a, b;`), `barrier`
//! (ignored), `measure` (anywhere: a gate after a measurement of its qubit makes the circuit
//! dynamic), `reset`, and `if(creg==n)` before a gate, `measure` or `reset`
//! ([`Circuit::instructions`], [`Circuit::dynamic`]). Refused with the line: `opaque` gates
//! other than Qiskit's built-in ones, and unknown gates.

use std::collections::{HashMap, VecDeque};
use std::f64::consts::PI;
use std::io::Read;
use std::rc::Rc;

use crate::gates::{self, Matrix};
use crate::QsimError;
use crate::Result;

/// The gates of Qiskit's `qelib1.inc` and the others its reader (`QuantumCircuit.from_qasm_str`,
/// with `qasm2.LEGACY_CUSTOM_INSTRUCTIONS`) has built in, with their parameter and qubit counts.
/// A program's definition of one of these names keeps the built-in meaning, as in Qiskit.
pub const STANDARD_GATES: &[(&str, usize, usize)] = &[
    ("U", 3, 1),
    ("CX", 0, 2),
    ("u3", 3, 1),
    ("u2", 2, 1),
    ("u1", 1, 1),
    ("u0", 1, 1),
    ("u", 3, 1),
    ("p", 1, 1),
    ("id", 0, 1),
    ("x", 0, 1),
    ("y", 0, 1),
    ("z", 0, 1),
    ("h", 0, 1),
    ("s", 0, 1),
    ("sdg", 0, 1),
    ("t", 0, 1),
    ("tdg", 0, 1),
    ("sx", 0, 1),
    ("sxdg", 0, 1),
    ("rx", 1, 1),
    ("ry", 1, 1),
    ("rz", 1, 1),
    ("cx", 0, 2),
    ("cy", 0, 2),
    ("cz", 0, 2),
    ("ch", 0, 2),
    ("csx", 0, 2),
    ("swap", 0, 2),
    ("crx", 1, 2),
    ("cry", 1, 2),
    ("crz", 1, 2),
    ("cu1", 1, 2),
    ("cp", 1, 2),
    ("cu3", 3, 2),
    ("cu", 4, 2),
    ("rxx", 1, 2),
    ("rzz", 1, 2),
    ("ccx", 0, 3),
    ("cswap", 0, 3),
    ("rccx", 0, 3),
    ("rc3x", 0, 4),
    ("c3x", 0, 4),
    ("c3sqrtx", 0, 4),
    ("c4x", 0, 5),
    // An idle of the given duration: the identity here, as in Aer. `qasm2.dumps` declares it
    // `opaque delay(param0) q0;`, which Qiskit's reader takes as its own delay.
    ("delay", 1, 1),
];

/// Standard gates of Qiskit's that are neither in `qelib1.inc` nor built into its reader:
/// `qasm2.dumps` writes a `gate` definition for each before using it. They are built in here too
/// (a program may use them without a definition), but a definition in the program wins, as in
/// Qiskit, where the definition is the only meaning such a name has.
pub const EXTRA_GATES: &[(&str, usize, usize)] = &[
    ("r", 2, 1),
    ("ryy", 1, 2),
    ("rzx", 1, 2),
    ("ecr", 0, 2),
    ("dcx", 0, 2),
    ("iswap", 0, 2),
    ("cs", 0, 2),
    ("csdg", 0, 2),
    ("xx_plus_yy", 2, 2),
    ("xx_minus_yy", 2, 2),
    ("ccz", 0, 3),
    ("rcccx", 0, 4),
];

/// The parameter and qubit counts of a built-in gate ([`STANDARD_GATES`] or [`EXTRA_GATES`]).
fn builtin(name: &str) -> Option<(usize, usize)> {
    STANDARD_GATES
        .iter()
        .chain(EXTRA_GATES)
        .find(|(n, _, _)| *n == name)
        .map(|&(_, p, q)| (p, q))
}

/// At most this many qubits over all `qreg`s: basis-state indices are `u64`, and the state of
/// even 50 qubits (16 PiB at f64) is beyond any machine; the simulator checks the real size
/// against memory before it allocates.
pub const MAX_QUBITS: usize = 63;

/// At most this many classical bits over all `creg`s (a register is expanded bit by bit when
/// measured into, so its size must be bounded too).
pub const MAX_CLBITS: usize = 1 << 16;

/// At most this many nested levels in a parameter expression (parentheses, unary signs, powers,
/// function calls). The parser is recursive; the limit keeps it far from the stack's end.
pub const MAX_EXPR_DEPTH: usize = 256;

/// At most this many nested gate definitions (a definition calling one that calls another...):
/// expansion is recursive, one level per definition.
pub const MAX_GATE_DEPTH: usize = 256;

/// At most this many primitive gates in a circuit by default ([`ParseOptions::max_gates`]),
/// after user gates are expanded (an empty expansion counts as one, so that expanding nothing is
/// bounded too; measurements and resets count as gates, being kept as they are). Each gate keeps
/// its own dense matrix and the simulator converts the list once more, about 800 bytes per gate
/// at the peak (measured), so the limit keeps a circuit's own memory under a gigabyte. Each is
/// checked before it is expanded: a definition's size is known when it is defined, so a program
/// whose definitions double at each level is refused at the call, not after filling memory.
pub const MAX_GATES: u64 = 1_000_000;

/// `--max-gates N`: a whole number of gates, at least 1 (the bound of
/// [`ParseOptions::max_gates`]).
pub fn parse_max_gates(text: &str) -> Result<u64> {
    match text.parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(QsimError::Config(format!(
            "--max-gates {text}: give the most gates a circuit may have after its gate \
             definitions are expanded, a whole number of at least 1 such as 5000000 (the default \
             is {MAX_GATES})"
        ))),
    }
}

/// At most this many bytes of tokens in one statement (spaces and comments not counted; a `gate`
/// definition is one statement, its body included), and in one line of an OpenQASM 3 program
/// (rewritten a line at a time). A statement is held whole while it is read (its expressions and
/// arguments, a definition's body), so this bounds what reading one costs: a hostile 4 MiB
/// expression such as `a+a+...` peaked at 270 MB (measured); what Qiskit writes, a small
/// fraction of that.
pub const MAX_STATEMENT_BYTES: usize = 4 << 20;

/// Registers and gate definitions are kept to the end of the program, so what they may take is
/// bounded by the gate limit too: each token of their statements is charged
/// [`KEPT_BYTES_PER_TOKEN`] and its own bytes, and the charge of all of them may reach this many
/// bytes per gate of [`ParseOptions::max_gates`] (or [`KEPT_BYTES_MIN`], when more): about what
/// the gates themselves may take. Qiskit's definitions come to 10 tokens or so per gate they
/// define, about 350 bytes; hostile ones (`gate g0(t) a { rz(t+t+...) a; }` and on) were
/// refused at the default limit with the process at 560 MB (measured).
pub const KEPT_BYTES_PER_GATE: u64 = 512;

/// The charge of all registers and gate definitions may always reach this much (see
/// [`KEPT_BYTES_PER_GATE`]), so that a low gate limit leaves room for a program's definitions.
pub const KEPT_BYTES_MIN: u64 = 64 << 20;

/// What a token kept in a register's or definition's statement is charged besides its bytes:
/// about what it becomes (a name, a term of an expression, an argument).
pub const KEPT_BYTES_PER_TOKEN: u64 = 32;

/// How a program is read: the bounds of what it may make the parser keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    max_gates: u64,
}

impl Default for ParseOptions {
    fn default() -> Self {
        ParseOptions {
            max_gates: MAX_GATES,
        }
    }
}

impl ParseOptions {
    /// The default bounds: [`MAX_GATES`] gates.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `gates` gates after expansion (measurements and resets counted as gates; at least
    /// 1), for circuits larger than [`MAX_GATES`]: each takes about 800 bytes while the circuit
    /// is parsed and converted for the run.
    pub fn max_gates(mut self, gates: u64) -> Self {
        self.max_gates = gates.max(1);
        self
    }

    /// What registers and definitions may be charged in all (see [`KEPT_BYTES_PER_GATE`]).
    fn kept_limit(&self) -> u64 {
        self.max_gates
            .saturating_mul(KEPT_BYTES_PER_GATE)
            .max(KEPT_BYTES_MIN)
    }
}

/// A unitary gate on numbered qubits. Bit `i` of the matrix's row and column index is the state
/// of `qubits[i]`.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The qelib1 name (or `fused`).
    pub name: String,
    /// The qubits, in the matrix's bit order.
    pub qubits: Vec<usize>,
    /// The unitary, `2^k x 2^k` for `k` qubits.
    pub matrix: Matrix,
    /// The line of the program it came from (0 for gates made by the simulator).
    pub line: usize,
}

/// A parsed program: qubits, classical bits, gates, and which qubit each measured bit reads.
#[derive(Debug, Clone, Default)]
pub struct Circuit {
    /// Total qubits over all `qreg`s.
    pub num_qubits: usize,
    /// Total classical bits over all `creg`s.
    pub num_clbits: usize,
    /// The unitary part, in program order.
    pub gates: Vec<Gate>,
    /// `(qubit, clbit)` for each `measure`, in program order.
    pub measurements: Vec<(usize, usize)>,
    /// The classical registers in declaration order (their bits are numbered in that order).
    pub classical_registers: Vec<ClassicalRegister>,
    /// Every operation in program order: gates (by index into `gates`), measurements, resets,
    /// each maybe conditioned on a register's value.
    pub instructions: Vec<Instruction>,
    /// The first line that makes the circuit dynamic (a `reset`, an `if`, or a gate or reset on
    /// a qubit after it was measured), or `None` when it is a unitary followed by measurements:
    /// a dynamic circuit has no single final state, and only its shots mean anything.
    pub dynamic: Option<usize>,
    /// What the program got away with, each saying how to fix it (read leniently, as Qiskit does).
    pub warnings: Vec<String>,
}

/// One operation of a circuit, in program order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `gates[i]`.
    Gate(usize),
    /// `measure qubit -> clbit`.
    Measure {
        /// The qubit measured.
        qubit: usize,
        /// The classical bit that receives the outcome.
        clbit: usize,
    },
    /// `reset qubit`: the qubit is measured, and flipped back to 0 if it read 1.
    Reset {
        /// The qubit reset.
        qubit: usize,
    },
}

/// `if(creg==value)`: classical bits `first..first + size` (a whole register, bit 0 least
/// significant, or one bit of it: `if (c[2])` in OpenQASM 3) compared to `value`; `negated` for
/// `!=` and for the `else` branch of an `if`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Condition {
    /// The register's bit 0 (or the one bit), numbered over all classical bits.
    pub first: usize,
    /// The register's width (1 for one bit).
    pub size: usize,
    /// The value compared with (below `2^size`).
    pub value: u64,
    /// Holds when the bits do not read `value`.
    pub negated: bool,
}

impl Condition {
    /// Whether the condition holds for these classical bits.
    pub fn holds(&self, clbits: &[bool]) -> bool {
        let equal = (0..self.size)
            .all(|i| clbits[self.first + i] == (i < 64 && (self.value >> i) & 1 == 1));
        equal != self.negated
    }
}

/// An operation and the condition it runs under (`None`: always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction {
    /// What it does.
    pub operation: Operation,
    /// When it does it.
    pub condition: Option<Condition>,
    /// The line of the program it came from (0 for operations made in code).
    pub line: usize,
}

/// A `creg`: its name and its bits, `first..first + size` of the circuit's classical bits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicalRegister {
    /// The name it was declared with.
    pub name: String,
    /// Its bit 0, numbered over all registers.
    pub first: usize,
    /// Its number of bits.
    pub size: usize,
}

impl Circuit {
    /// Counts keys as Qiskit's `get_counts()` writes them, from a value of every classical bit
    /// (`bits[c]` for bit `c`): one group per register, the last declared first, each with its
    /// bit 0 rightmost, groups separated by a space. With no registers, the bits as one group.
    pub fn counts_key(&self, bits: &[bool]) -> String {
        let group = |range: std::ops::Range<usize>| -> String {
            range
                .rev()
                .map(|c| if bits[c] { '1' } else { '0' })
                .collect()
        };
        if self.classical_registers.is_empty() {
            return group(0..bits.len());
        }
        self.classical_registers
            .iter()
            .rev()
            .map(|r| group(r.first..r.first + r.size))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Circuit {
    /// An empty circuit on `num_qubits` qubits (for circuits built in code).
    pub fn new(num_qubits: usize) -> Circuit {
        Circuit {
            num_qubits,
            ..Circuit::default()
        }
    }

    /// Append a standard gate by name, e.g. `push("cx", &[], &[0, 1])`.
    pub fn push(&mut self, name: &str, params: &[f64], qubits: &[usize]) -> Result<()> {
        if let Some(p) = params.iter().find(|p| !p.is_finite()) {
            return Err(QsimError::Parse {
                line: 0,
                message: format!("gate {name:?} is given parameter {p}: parameters must be finite"),
            });
        }
        let matrix = standard_matrix(name, params).ok_or_else(|| QsimError::Parse {
            line: 0,
            message: format!("unknown gate {name:?} or wrong parameter count"),
        })?;
        if let Some(&q) = qubits.iter().find(|&&q| q >= self.num_qubits) {
            return Err(QsimError::Parse {
                line: 0,
                message: format!(
                    "qubit {q} is beyond the circuit's {} qubits",
                    self.num_qubits
                ),
            });
        }
        self.instructions.push(Instruction {
            operation: Operation::Gate(self.gates.len()),
            condition: None,
            line: 0,
        });
        self.gates.push(Gate {
            name: name.to_string(),
            qubits: qubits.to_vec(),
            matrix,
            line: 0,
        });
        Ok(())
    }
}

/// The matrix of a standard gate, with Qiskit's definitions (global phases included, so that
/// amplitudes match Qiskit's exactly). Qubit order: controls first, then targets.
pub fn standard_matrix(name: &str, p: &[f64]) -> Option<Matrix> {
    let (nparams, _) = builtin(name)?;
    if p.len() != nparams {
        return None;
    }
    Some(match name {
        "U" | "u3" | "u" => gates::u3(p[0], p[1], p[2]),
        "u2" => gates::u3(PI / 2.0, p[0], p[1]),
        "u1" | "p" => gates::phase(p[0]),
        "u0" | "id" | "delay" => gates::identity(1),
        "x" => gates::x(),
        "y" => gates::y(),
        "z" => gates::phase(PI),
        "h" => gates::h(),
        "s" => gates::phase(PI / 2.0),
        "sdg" => gates::phase(-PI / 2.0),
        "t" => gates::phase(PI / 4.0),
        "tdg" => gates::phase(-PI / 4.0),
        "sx" => gates::sx(),
        "sxdg" => gates::sx().adjoint(),
        "rx" => gates::rx(p[0]),
        "ry" => gates::ry(p[0]),
        "rz" => gates::rz(p[0]),
        "CX" | "cx" => gates::controlled(&gates::x(), 1),
        "cy" => gates::controlled(&gates::y(), 1),
        "cz" => gates::controlled(&gates::phase(PI), 1),
        "ch" => gates::controlled(&gates::h(), 1),
        "csx" => gates::controlled(&gates::sx(), 1),
        "swap" => gates::swap(),
        "crx" => gates::controlled(&gates::rx(p[0]), 1),
        "cry" => gates::controlled(&gates::ry(p[0]), 1),
        "crz" => gates::controlled(&gates::rz(p[0]), 1),
        "cu1" | "cp" => gates::controlled(&gates::phase(p[0]), 1),
        "cu3" => gates::controlled(&gates::u3(p[0], p[1], p[2]), 1),
        "cu" => gates::controlled(&gates::u3(p[0], p[1], p[2]).scaled_phase(p[3]), 1),
        "rxx" => gates::rxx(p[0]),
        "rzz" => gates::rzz(p[0]),
        "ccx" => gates::controlled(&gates::x(), 2),
        "cswap" => gates::controlled(&gates::swap(), 1),
        "rccx" => gates::rccx(),
        "rc3x" | "rcccx" => gates::rc3x(),
        "c3x" => gates::controlled(&gates::x(), 3),
        "c3sqrtx" => gates::controlled(&gates::sx(), 3),
        "c4x" => gates::controlled(&gates::x(), 4),
        "r" => gates::r(p[0], p[1]),
        "ryy" => gates::ryy(p[0]),
        "rzx" => gates::rzx(p[0]),
        "ecr" => gates::ecr(),
        "dcx" => gates::dcx(),
        "iswap" => gates::iswap(),
        "cs" => gates::controlled(&gates::phase(PI / 2.0), 1),
        "csdg" => gates::controlled(&gates::phase(-PI / 2.0), 1),
        "xx_plus_yy" => gates::xx_plus_yy(p[0], p[1]),
        "xx_minus_yy" => gates::xx_minus_yy(p[0], p[1]),
        "ccz" => gates::controlled(&gates::phase(PI), 2),
        _ => return None,
    })
}

/// Whether `a` is `b` times one global phase, within rounding.
fn same_up_to_phase(a: &Matrix, b: &Matrix) -> bool {
    if a.qubits() != b.qubits() {
        return false;
    }
    // The phase from b's largest entry (a unitary has one of modulus at least 2^-k/2).
    let Some((at, big)) = b
        .entries()
        .iter()
        .enumerate()
        .max_by(|x, y| x.1.norm_sqr().total_cmp(&y.1.norm_sqr()))
    else {
        return false;
    };
    let other = a.entries()[at];
    // other / big, as a unit complex number.
    let ratio = other * big.conj();
    let scale = big.norm_sqr();
    let phase = gates::Complex::new(ratio.re / scale, ratio.im / scale);
    if (phase.norm_sqr() - 1.0).abs() > 1e-9 {
        return false;
    }
    a.entries().iter().zip(b.entries()).all(|(&x, &y)| {
        let want = y * phase;
        (x.re - want.re).abs() < 1e-9 && (x.im - want.im).abs() < 1e-9
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    /// A number's value and its text as written (messages name `1e300`, not what it became).
    Number(f64, String),
    Str(String),
    Sym(&'static str),
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "{s:?}"),
            Tok::Number(_, text) => write!(f, "{text}"),
            Tok::Str(s) => write!(f, "\"{s}\""),
            Tok::Sym(s) => write!(f, "{s:?}"),
        }
    }
}

/// Bytes read from the program at a time: a file of any size costs this much to hold.
const READ_BLOCK: usize = 64 << 10;

/// The program's bytes, read a block at a time as the parser needs them.
struct Input<R> {
    reader: R,
    buf: Vec<u8>,
    at: usize,
    end: usize,
    eof: bool,
    /// The line of the next byte.
    line: usize,
}

impl<R: Read> Input<R> {
    fn new(reader: R) -> Self {
        Input {
            reader,
            buf: vec![0; READ_BLOCK],
            at: 0,
            end: 0,
            eof: false,
            line: 1,
        }
    }

    /// The byte `k` places after the next one (`k` far below a block), `None` past the end.
    #[inline]
    fn peek(&mut self, k: usize) -> Result<Option<u8>> {
        if self.at + k < self.end {
            return Ok(Some(self.buf[self.at + k]));
        }
        self.fill(k)?;
        Ok(self.buf[..self.end].get(self.at + k).copied())
    }

    #[cold]
    fn fill(&mut self, k: usize) -> Result<()> {
        while self.at + k >= self.end && !self.eof {
            if self.end == self.buf.len() {
                self.buf.copy_within(self.at..self.end, 0);
                self.end -= self.at;
                self.at = 0;
            }
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(QsimError::Read {
                        line: self.line,
                        source,
                    })
                }
            }
        }
        Ok(())
    }

    /// Step over the next byte, which a `peek` has seen.
    #[inline]
    fn bump(&mut self) {
        if self.buf[self.at] == b'\n' {
            self.line += 1;
        }
        self.at += 1;
    }
}

/// The bytes the lexer reads: the program's own (OpenQASM 2), or its lines rewritten one at a
/// time as OpenQASM 2 (OpenQASM 3), which keeps every line where it was.
struct Source<R> {
    input: Input<R>,
    qasm3: Option<Qasm3Lines>,
    /// The line of the next byte.
    line: usize,
}

/// OpenQASM 3 lines rewritten as OpenQASM 2, the current one and what is left of it.
struct Qasm3Lines {
    rewriter: Qasm3Rewriter,
    text: Vec<u8>,
    at: usize,
    raw: Vec<u8>,
}

impl<R: Read> Source<R> {
    fn new(reader: R) -> Result<Self> {
        let mut input = Input::new(reader);
        // Blank lines and comments, then the header (if any) says which language follows.
        loop {
            match input.peek(0)? {
                Some(c) if (c as char).is_whitespace() => input.bump(),
                Some(b'/') if input.peek(1)? == Some(b'/') => {
                    while !matches!(input.peek(0)?, None | Some(b'\n')) {
                        input.bump();
                    }
                }
                _ => break,
            }
        }
        let qasm3 = header_is_openqasm3(&mut input)?.then(|| Qasm3Lines {
            rewriter: Qasm3Rewriter::default(),
            text: Vec::new(),
            at: 0,
            raw: Vec::new(),
        });
        Ok(Source {
            line: input.line,
            input,
            qasm3,
        })
    }

    /// The byte `k` places after the next one, `None` past the end.
    #[inline]
    fn peek(&mut self, k: usize) -> Result<Option<u8>> {
        let Some(q) = &mut self.qasm3 else {
            return self.input.peek(k);
        };
        while q.at + k >= q.text.len() {
            if !q.next_line(&mut self.input)? {
                return Ok(None);
            }
        }
        Ok(Some(q.text[q.at + k]))
    }

    /// Step over the next byte, which a `peek` has seen.
    #[inline]
    fn bump(&mut self) {
        let b = match &mut self.qasm3 {
            None => {
                let b = self.input.buf[self.input.at];
                self.input.bump();
                b
            }
            Some(q) => {
                q.at += 1;
                q.text[q.at - 1]
            }
        };
        if b == b'\n' {
            self.line += 1;
        }
    }
}

/// Whether the program, from its first word on, starts with `OPENQASM 3` (on one line).
fn header_is_openqasm3<R: Read>(input: &mut Input<R>) -> Result<bool> {
    for (k, &b) in b"OPENQASM".iter().enumerate() {
        if input.peek(k)? != Some(b) {
            return Ok(false);
        }
    }
    // A header is short: spaces past a few hundred are not one's.
    for k in 8..256 {
        match input.peek(k)? {
            Some(b'3') => return Ok(true),
            Some(c) if c != b'\n' && (c as char).is_whitespace() => {}
            _ => return Ok(false),
        }
    }
    Ok(false)
}

impl Qasm3Lines {
    /// Read the next line and append it, rewritten, to `text`; false at the end of the program.
    /// A line is held whole to be rewritten (its comment is skipped, not held), so it is bounded
    /// as a statement is.
    fn next_line<R: Read>(&mut self, input: &mut Input<R>) -> Result<bool> {
        if input.peek(0)?.is_none() {
            return Ok(false);
        }
        let line = input.line;
        self.raw.clear();
        let mut comment = false;
        loop {
            match input.peek(0)? {
                None => break,
                Some(b'\n') => {
                    input.bump();
                    break;
                }
                Some(b) => {
                    if !comment && b == b'/' && input.peek(1)? == Some(b'/') {
                        comment = true;
                    }
                    if !comment {
                        if self.raw.len() == MAX_STATEMENT_BYTES {
                            return Err(QsimError::Parse {
                                line,
                                message: format!(
                                    "the line is longer than {MAX_STATEMENT_BYTES} bytes: an \
                                     OpenQASM 3 program is read line by line; split it over \
                                     several lines"
                                ),
                            });
                        }
                        self.raw.push(b);
                    }
                    input.bump();
                }
            }
        }
        let raw = String::from_utf8_lossy(&self.raw);
        let rewritten = self.rewriter.line(raw.trim(), line)?;
        self.text.drain(..self.at);
        self.at = 0;
        self.text.extend_from_slice(rewritten.as_bytes());
        self.text.push(b'\n');
        Ok(true)
    }
}

/// A token, its line, and its bytes (counted against its statement's bound).
struct Lexed {
    tok: Tok,
    line: usize,
    bytes: usize,
}

/// Tokens read one at a time, as the parser asks for them.
struct Lexer<R> {
    src: Source<R>,
    /// Bytes and tokens of the statement being read (see [`MAX_STATEMENT_BYTES`]).
    statement_bytes: usize,
    statement_tokens: usize,
}

impl<R: Read> Lexer<R> {
    /// Count one more byte of a token of the statement being read, refused past its bound.
    #[inline]
    fn take(&mut self, line: usize) -> Result<()> {
        self.statement_bytes += 1;
        if self.statement_bytes > MAX_STATEMENT_BYTES {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "this statement is longer than {MAX_STATEMENT_BYTES} bytes (spaces and \
                     comments not counted): split it (a long gate definition into several that \
                     call each other)"
                ),
            });
        }
        Ok(())
    }

    /// Take the next byte, `b`, into `text`.
    #[inline]
    fn take_one(&mut self, text: &mut String, b: u8, line: usize) -> Result<()> {
        self.take(line)?;
        text.push(b as char);
        self.src.bump();
        Ok(())
    }

    /// Take the next bytes into `text` while `keep` holds for them.
    fn take_while(
        &mut self,
        text: &mut String,
        line: usize,
        keep: impl Fn(u8) -> bool,
    ) -> Result<()> {
        while let Some(b) = self.src.peek(0)? {
            if !keep(b) {
                break;
            }
            self.take_one(text, b, line)?;
        }
        Ok(())
    }

    /// The next token, `None` at the end of the program.
    fn token(&mut self) -> Result<Option<Lexed>> {
        loop {
            match self.src.peek(0)? {
                None => return Ok(None),
                Some(c) if (c as char).is_whitespace() => self.src.bump(),
                Some(b'/') if self.src.peek(1)? == Some(b'/') => {
                    while !matches!(self.src.peek(0)?, None | Some(b'\n')) {
                        self.src.bump();
                    }
                }
                Some(_) => break,
            }
        }
        let line = self.src.line;
        let before = self.statement_bytes;
        let c = self.src.peek(0)?.expect("a byte was seen");
        let tok = if c.is_ascii_alphabetic() || c == b'_' {
            let mut name = String::new();
            self.take_while(&mut name, line, |b| b.is_ascii_alphanumeric() || b == b'_')?;
            Tok::Ident(name)
        } else if c.is_ascii_digit()
            || (c == b'.' && self.src.peek(1)?.is_some_and(|d| d.is_ascii_digit()))
        {
            let mut text = String::new();
            self.take_while(&mut text, line, |b| b.is_ascii_digit() || b == b'.')?;
            if let Some(e @ (b'e' | b'E')) = self.src.peek(0)? {
                self.take_one(&mut text, e, line)?;
                if let Some(sign @ (b'+' | b'-')) = self.src.peek(0)? {
                    self.take_one(&mut text, sign, line)?;
                }
                self.take_while(&mut text, line, |b| b.is_ascii_digit())?;
            }
            let n: f64 = text.parse().map_err(|_| QsimError::Parse {
                line,
                message: format!("malformed number {text:?}"),
            })?;
            if !n.is_finite() {
                return Err(QsimError::Parse {
                    line,
                    message: format!("number {text} is too large for a double"),
                });
            }
            Tok::Number(n, text)
        } else if c == b'"' {
            let unterminated = || QsimError::Parse {
                line,
                message: "unterminated string".into(),
            };
            self.take(line)?;
            self.src.bump();
            let mut bytes = Vec::new();
            loop {
                match self.src.peek(0)? {
                    Some(b'"') => break,
                    // The line ends first, or a comment starts: at `//` wherever it is, even in
                    // a string.
                    None | Some(b'\n') => return Err(unterminated()),
                    Some(b'/') if self.src.peek(1)? == Some(b'/') => return Err(unterminated()),
                    Some(b) => {
                        self.take(line)?;
                        bytes.push(b);
                        self.src.bump();
                    }
                }
            }
            self.take(line)?;
            self.src.bump();
            Tok::Str(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            let next = self.src.peek(1)?;
            let sym = match (c, next) {
                (b'-', Some(b'>')) => "->",
                (b'=', Some(b'=')) => "==",
                (b'!', Some(b'=')) => "!=",
                (b';', _) => ";",
                (b',', _) => ",",
                (b'(', _) => "(",
                (b')', _) => ")",
                (b'[', _) => "[",
                (b']', _) => "]",
                (b'{', _) => "{",
                (b'}', _) => "}",
                (b'+', _) => "+",
                (b'-', _) => "-",
                (b'*', _) => "*",
                (b'/', _) => "/",
                (b'^', _) => "^",
                _ => return Err(self.unexpected(c, line)),
            };
            for _ in 0..sym.len() {
                self.take(line)?;
                self.src.bump();
            }
            Tok::Sym(sym)
        };
        self.statement_tokens += 1;
        Ok(Some(Lexed {
            tok,
            line,
            bytes: self.statement_bytes - before,
        }))
    }

    /// The error for a byte no token starts with, naming the character when it is one.
    fn unexpected(&mut self, c: u8, line: usize) -> QsimError {
        let what = if c.is_ascii() {
            format!("character {:?}", c as char)
        } else {
            // A UTF-8 character is up to four bytes.
            let bytes: Vec<u8> = (0..4)
                .map_while(|k| self.src.peek(k).ok().flatten())
                .collect();
            let len = match c {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                _ => 4,
            };
            match std::str::from_utf8(&bytes[..len.min(bytes.len())]) {
                Ok(s) => format!("character {:?}", s.chars().next().unwrap_or('?')),
                Err(_) => format!("byte 0x{c:02X} (the program is not UTF-8 text)"),
            }
        };
        QsimError::Parse {
            line,
            message: format!("unexpected {what}"),
        }
    }
}

/// One step of a parameter expression, in postfix order.
#[derive(Debug, Clone)]
enum Code {
    Num(f64),
    Var(String),
    Neg,
    Bin(char),
    Call(String),
}

/// A parameter expression as postfix code (kept inside gate definitions, evaluated at each use).
/// Flat rather than a tree: evaluating or dropping a long expression such as `1+1+...+1` costs
/// no stack, and only parsing recurses (bounded by [`MAX_EXPR_DEPTH`]).
#[derive(Debug, Clone, Default)]
struct Expr(Vec<Code>);

impl Expr {
    /// The value, with `names[i]` bound to `values[i]`. Every intermediate value must be finite:
    /// a NaN or infinite angle would turn the whole state into NaN.
    fn eval(&self, names: &[String], values: &[f64], line: usize) -> Result<f64> {
        let bad = |message: String| Err(QsimError::Parse { line, message });
        let mut stack: Vec<f64> = Vec::with_capacity(8);
        for code in &self.0 {
            // The parser emits well-formed postfix code: operands are always there.
            let mut pop = || stack.pop().expect("postfix code is well formed");
            let (v, what) = match code {
                Code::Num(n) => (*n, "a number"),
                Code::Var(v) => match names.iter().position(|n| n == v) {
                    Some(i) => (values[i], "a parameter"),
                    None => return bad(format!("unknown parameter {v:?}")),
                },
                Code::Neg => (-pop(), "negation"),
                Code::Bin(op) => {
                    let (b, a) = (pop(), pop());
                    match op {
                        '+' => (a + b, "`+`"),
                        '-' => (a - b, "`-`"),
                        '*' => (a * b, "`*`"),
                        '/' if b == 0.0 => {
                            return bad(format!("division by zero in a gate parameter ({a} / 0)"))
                        }
                        '/' => (a / b, "`/`"),
                        _ => (a.powf(b), "`^`"),
                    }
                }
                Code::Call(f) => {
                    let x = pop();
                    let v = match f.as_str() {
                        "sin" => x.sin(),
                        "cos" => x.cos(),
                        "tan" => x.tan(),
                        "exp" => x.exp(),
                        "ln" => x.ln(),
                        _ => x.sqrt(),
                    };
                    if !v.is_finite() {
                        return bad(format!(
                            "{f}({x}) is not a finite number: gate parameters must be finite"
                        ));
                    }
                    (v, "a function")
                }
            };
            if !v.is_finite() {
                return bad(format!(
                    "a gate parameter is not a finite number ({v} from {what}): parameters \
                     must be finite"
                ));
            }
            stack.push(v);
        }
        Ok(stack.pop().expect("an expression has a value"))
    }
}

/// A statement inside a gate definition: a gate applied to the definition's own arguments.
#[derive(Debug, Clone)]
struct BodyCall {
    name: String,
    /// The definition it calls, fixed when the enclosing gate is defined (`None`: a built-in), so
    /// that a later definition of the same name does not change a gate defined before it.
    def: Option<Rc<GateDef>>,
    params: Vec<Expr>,
    args: Vec<String>,
    line: usize,
}

#[derive(Debug, Clone)]
struct GateDef {
    params: Vec<String>,
    args: Vec<String>,
    body: Vec<BodyCall>,
    /// Primitive gates one use expands to (see [`MAX_GATES`]), saturating.
    cost: u64,
    /// Nested definitions below and including this one (see [`MAX_GATE_DEPTH`]).
    depth: usize,
}

/// A non-negative integer as the program wrote it: its value (`None` from 2^64 on) and its text,
/// so that a size such as `1e300` is named as written.
struct Integer {
    value: Option<u64>,
    text: String,
}

/// An argument: a whole register, or one of its qubits.
enum Arg {
    Register(String),
    Bit(String, Integer),
}

struct Parser<R> {
    lexer: Lexer<R>,
    /// Tokens read ahead of the parser (at most two).
    ahead: VecDeque<Lexed>,
    /// Why the next token could not be read, for where the parser needs it.
    failed: Option<QsimError>,
    /// The program has no more tokens.
    ended: bool,
    /// The line of the last token read, for an error at the end of the program.
    last_line: usize,
    options: ParseOptions,
    qregs: HashMap<String, (usize, usize)>,
    cregs: HashMap<String, (usize, usize)>,
    defs: HashMap<String, Rc<GateDef>>,
    circuit: Circuit,
    measured: Vec<bool>,
    /// The condition of the `if` statement being read, applied to every operation it makes.
    condition: Option<Condition>,
    /// Current nesting of the expression being parsed.
    depth: usize,
    /// Operations kept so far (gates after expansion, measurements, resets), counted against
    /// [`ParseOptions::max_gates`].
    expanded: u64,
    /// What the registers and definitions kept so far are charged (see [`KEPT_BYTES_PER_GATE`]).
    kept: u64,
}

/// Parse an OpenQASM 2.0 program (or the OpenQASM 3 that Qiskit writes) under the default
/// bounds.
pub fn parse(src: &str) -> Result<Circuit> {
    parse_reader(src.as_bytes(), &ParseOptions::default())
}

/// Parse a program as it is read from `reader`, a block at a time: each statement is read,
/// checked and expanded before the next is read, so that what parsing holds is what it keeps
/// (bounded by `options`), whatever the program's size, and a program past a bound is refused
/// there, without reading the rest.
pub fn parse_reader<R: Read>(reader: R, options: &ParseOptions) -> Result<Circuit> {
    let mut p = Parser {
        lexer: Lexer {
            src: Source::new(reader)?,
            statement_bytes: 0,
            statement_tokens: 0,
        },
        ahead: VecDeque::new(),
        failed: None,
        ended: false,
        last_line: 1,
        options: *options,
        qregs: HashMap::new(),
        cregs: HashMap::new(),
        defs: HashMap::new(),
        circuit: Circuit::default(),
        measured: Vec::new(),
        condition: None,
        depth: 0,
        expanded: 0,
        kept: 0,
    };
    p.program()?;
    Ok(p.circuit)
}

/// The subset of OpenQASM 3 that `qiskit.qasm3.dumps` writes for the circuits this simulator
/// runs, rewritten line for line as OpenQASM 2 (so that errors keep their line numbers):
/// `include "stdgates.inc"`, `qubit[n] q;` and `bit[n] c;` (or one of each without `[n]`),
/// `c[0] = measure q[0];`, `if (...) { ... }` and `} else { ... }` over their bodies'
/// statements, where the condition is a register or one bit of it compared with `==` or `!=`,
/// or a bit alone (`c[0]`, `!c[0]`); `phase`/`cphase` for `p`/`cp`; gate definitions, gate
/// calls, `reset` and `barrier` are the same in both. Anything else is left as it is, for the
/// OpenQASM 2 reader to refuse with its line.
#[derive(Default)]
struct Qasm3Rewriter {
    /// What each open `{` belongs to: a gate definition (kept) or an `if`/`else` (its condition).
    blocks: Vec<Option<Qasm3Condition>>,
    /// The `if` whose block the previous line closed, for an `else {` on the next.
    closed_if: Option<Qasm3Condition>,
}

impl Qasm3Rewriter {
    /// Line `line` of the program (`text`: without its comment, trimmed) as OpenQASM 2.
    fn line(&mut self, text: &str, line: usize) -> Result<String> {
        let bad = |message: String| Err(QsimError::Parse { line, message });
        let blocks = &mut self.blocks;
        let condition: String = blocks
            .iter()
            .flatten()
            .map(Qasm3Condition::prefix)
            .collect();
        let after_if = self.closed_if.take();
        let statement = if text.starts_with("OPENQASM") {
            "OPENQASM 2.0;".to_string()
        } else if text == r#"include "stdgates.inc";"# {
            r#"include "qelib1.inc";"#.to_string()
        } else if let Some(rest) = text
            .strip_prefix("if")
            .filter(|r| r.trim_start().starts_with('('))
        {
            let rest = rest.trim_start();
            let Some((cond, body)) = rest.strip_prefix('(').and_then(|r| r.split_once(')')) else {
                return bad(format!("expected `if (register == value)`, found {text:?}"));
            };
            let cond = match Qasm3Condition::parse(cond) {
                Ok(c) => c,
                Err(message) => return bad(message),
            };
            if !condition.is_empty() {
                return bad(
                    "nested `if` blocks are not supported: write the inner condition on the \
                     register as a whole (`if (c == n)`)"
                        .into(),
                );
            }
            let body = body.trim();
            if body == "{" {
                blocks.push(Some(cond));
                String::new()
            } else if body.starts_with('{') || body.is_empty() {
                return bad(format!(
                    "write the body of {text:?} as `if (...) {{` with one statement per line, as \
                     qiskit.qasm3.dumps does"
                ));
            } else {
                format!("{}{body}", cond.prefix())
            }
        } else if text == "} else {" || text == "else {" {
            let opened = if text == "else {" {
                after_if
            } else if let Some(Some(_)) = blocks.last() {
                blocks.pop().flatten()
            } else {
                None
            };
            let Some(cond) = opened else {
                return bad("`else` without an `if` block just before it".into());
            };
            blocks.push(Some(cond.negated()));
            String::new()
        } else if text == "}" && blocks.last().is_some_and(Option::is_some) {
            self.closed_if = blocks.pop().flatten();
            String::new()
        } else if text.ends_with('{') && text.starts_with("gate ") {
            blocks.push(None);
            text.to_string()
        } else if text == "}" {
            blocks.pop();
            text.to_string()
        } else {
            let declared = ["qubit", "bit"].iter().find_map(|kind| {
                let rest = text.strip_prefix(kind)?;
                let (size, name) = if let Some(r) = rest.strip_prefix('[') {
                    let (size, name) = r.split_once(']')?;
                    (size.trim().to_string(), name)
                } else if rest.starts_with(' ') {
                    ("1".to_string(), rest)
                } else {
                    return None;
                };
                let name = name.trim().strip_suffix(';')?.trim();
                let kw = if *kind == "qubit" { "qreg" } else { "creg" };
                Some(format!("{kw} {name}[{size}];"))
            });
            if let Some(decl) = declared {
                decl
            } else if let Some((target, rhs)) = text
                .split_once('=')
                .filter(|(_, r)| !r.starts_with('=') && r.trim_start().starts_with("measure"))
            {
                let qubits = rhs.trim_start()["measure".len()..].trim();
                let qubits = qubits.strip_suffix(';').unwrap_or(qubits);
                format!("{condition}measure {} -> {};", qubits.trim(), target.trim())
            } else {
                let renamed = if let Some(r) = text.strip_prefix("cphase(") {
                    format!("cp({r}")
                } else if let Some(r) = text.strip_prefix("phase(") {
                    format!("p({r}")
                } else {
                    text.to_string()
                };
                format!("{condition}{renamed}")
            }
        };
        Ok(statement)
    }
}

/// An OpenQASM 3 `if` condition as the OpenQASM 2 reader takes it: `lhs` a register or one bit
/// of it (`c[2]`), compared with `value`.
#[derive(Debug, Clone)]
struct Qasm3Condition {
    lhs: String,
    not_equal: bool,
    value: String,
}

impl Qasm3Condition {
    /// `c == 2`, `c != 2`, `c[0] == 1`, `c[0] == true`, `c[0]`, `!c[0]`.
    fn parse(cond: &str) -> Result<Self, String> {
        let cond = cond.trim();
        let unsupported = || {
            format!(
                "if ({cond}): the condition must be a register or one of its bits compared with \
                 `==` or `!=` to a value, or a bit alone (`c[0]`, `!c[0]`)"
            )
        };
        let is_name = |t: &str| {
            let (name, index) = match t.split_once('[') {
                Some((n, rest)) => (n, Some(rest)),
                None => (t, None),
            };
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && index.is_none_or(|r| {
                    r.strip_suffix(']')
                        .is_some_and(|i| !i.is_empty() && i.chars().all(|c| c.is_ascii_digit()))
                })
        };
        let (lhs, not_equal, value) = if let Some((l, v)) = cond.split_once("==") {
            (l.trim(), false, v.trim())
        } else if let Some((l, v)) = cond.split_once("!=") {
            (l.trim(), true, v.trim())
        } else if let Some(bit) = cond.strip_prefix('!') {
            (bit.trim(), false, "0")
        } else {
            (cond, false, "1")
        };
        let value = match value {
            "true" => "1",
            "false" => "0",
            v => v,
        };
        let bare_register = !cond.contains('=') && !lhs.contains('[');
        if !is_name(lhs)
            || bare_register
            || !value.chars().all(|c| c.is_ascii_digit())
            || value.is_empty()
        {
            return Err(unsupported());
        }
        Ok(Self {
            lhs: lhs.to_string(),
            not_equal,
            value: value.to_string(),
        })
    }

    /// The opposite condition (an `else` block's).
    fn negated(&self) -> Self {
        Self {
            not_equal: !self.not_equal,
            ..self.clone()
        }
    }

    /// The OpenQASM 2 prefix: `if(c[0]==1) `.
    fn prefix(&self) -> String {
        let op = if self.not_equal { "!=" } else { "==" };
        format!("if({}{op}{}) ", self.lhs, self.value)
    }
}

impl<R: Read> Parser<R> {
    /// Read ahead until `n` tokens wait (fewer at the end of the program or at a token that
    /// cannot be read, whose error waits in `failed`).
    fn fill(&mut self, n: usize) {
        while self.ahead.len() < n && self.failed.is_none() && !self.ended {
            match self.lexer.token() {
                Ok(Some(t)) => {
                    self.last_line = t.line;
                    self.ahead.push_back(t);
                }
                Ok(None) => self.ended = true,
                Err(e) => self.failed = Some(e),
            }
        }
    }

    /// The line of the next token (of the last one at the end of the program).
    fn line(&mut self) -> usize {
        self.fill(1);
        match (self.ahead.front(), &self.failed) {
            (Some(t), _) => t.line,
            (None, Some(QsimError::Parse { line, .. } | QsimError::Read { line, .. })) => *line,
            (None, _) => self.last_line,
        }
    }

    fn err<T>(&mut self, message: impl Into<String>) -> Result<T> {
        Err(QsimError::Parse {
            line: self.line(),
            message: message.into(),
        })
    }

    /// The next token, `None` at the end of the program.
    fn peek(&mut self) -> Result<Option<&Tok>> {
        self.fill(1);
        if self.ahead.is_empty() {
            if let Some(e) = self.failed.take() {
                return Err(e);
            }
        }
        Ok(self.ahead.front().map(|t| &t.tok))
    }

    fn next(&mut self) -> Result<Tok> {
        self.fill(1);
        match self.ahead.pop_front() {
            Some(t) => Ok(t.tok),
            None => match self.failed.take() {
                Some(e) => Err(e),
                None => self.err("unexpected end of program (a missing ';' or '}'?)"),
            },
        }
    }

    /// Step over the next token, which a `peek` has seen.
    fn bump(&mut self) {
        self.ahead.pop_front();
    }

    fn is_sym(&mut self, s: &str) -> Result<bool> {
        Ok(matches!(self.peek()?, Some(Tok::Sym(x)) if *x == s))
    }

    fn expect_sym(&mut self, s: &str) -> Result<()> {
        let line = self.line();
        match self.next()? {
            Tok::Sym(x) if x == s => Ok(()),
            other => Err(QsimError::Parse {
                line,
                message: format!("expected {s:?}, found {other}"),
            }),
        }
    }

    fn ident(&mut self) -> Result<String> {
        let line = self.line();
        match self.next()? {
            Tok::Ident(s) => Ok(s),
            other => Err(QsimError::Parse {
                line,
                message: format!("expected a name, found {other}"),
            }),
        }
    }

    fn integer(&mut self) -> Result<Integer> {
        let line = self.line();
        match self.next()? {
            Tok::Number(n, text) if n >= 0.0 && n.fract() == 0.0 => {
                // Digits are read exactly (a double holds integers exactly only to 2^53).
                let value = if text.bytes().all(|b| b.is_ascii_digit()) {
                    text.parse().ok()
                } else {
                    (n < 2f64.powi(64)).then_some(n as u64)
                };
                Ok(Integer { value, text })
            }
            other => Err(QsimError::Parse {
                line,
                message: format!("expected a non-negative integer, found {other}"),
            }),
        }
    }

    /// A new statement starts with the tokens read ahead: its bound counts from them.
    fn begin_statement(&mut self) {
        self.lexer.statement_bytes = self.ahead.iter().map(|t| t.bytes).sum();
        self.lexer.statement_tokens = self.ahead.len();
    }

    /// Charge the statement just read (a register or a definition, kept to the end of the
    /// program) against what such declarations may take.
    fn keep_statement(&mut self, line: usize) -> Result<()> {
        let charge = self.lexer.statement_tokens as u64 * KEPT_BYTES_PER_TOKEN
            + self.lexer.statement_bytes as u64;
        self.kept = self.kept.saturating_add(charge);
        let limit = self.options.kept_limit();
        if self.kept > limit {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "the registers and gate definitions up to here take more than {limit} bytes \
                     ({KEPT_BYTES_PER_GATE} per gate of the limit of {} gates, and at least \
                     {KEPT_BYTES_MIN}): declare fewer or smaller ones, or raise the limit \
                     (--max-gates)",
                    self.options.max_gates
                ),
            });
        }
        Ok(())
    }

    /// Count `n` measurements or resets (`what`) against the gate limit before they are kept.
    fn reserve(&mut self, n: usize, what: &str, line: usize) -> Result<()> {
        let max = self.options.max_gates;
        if n as u64 > max - self.expanded {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "this statement makes {n} {what}, which takes the circuit past its limit of \
                     {max} gates ({} before it; measurements and resets count as gates): split \
                     the circuit or raise the limit (--max-gates)",
                    self.expanded
                ),
            });
        }
        self.expanded += n as u64;
        Ok(())
    }

    fn program(&mut self) -> Result<()> {
        self.fill(2);
        let version = match (self.ahead.front(), self.ahead.get(1)) {
            (Some(kw), Some(v)) if kw.tok == Tok::Ident("OPENQASM".into()) => match &v.tok {
                Tok::Number(v, text) => Some((*v, text.clone())),
                _ => None,
            },
            _ => None,
        };
        match version {
            Some((v, text)) => {
                if v != 2.0 {
                    return self.err(format!(
                        "OPENQASM {text} is not supported: this simulator reads OpenQASM 2.0"
                    ));
                }
                self.ahead.drain(..2);
                self.expect_sym(";")?;
            }
            // Qiskit reads a program without the header as OpenQASM 2.0; so does this parser,
            // with a warning, since other readers refuse it.
            None => {
                let line = self.line();
                self.circuit.warnings.push(format!(
                    "line {line}: the program does not start with `OPENQASM 2.0;`: read as \
                     OpenQASM 2.0 (as Qiskit does); add `OPENQASM 2.0;` as its first line for \
                     other readers"
                ))
            }
        }
        loop {
            self.begin_statement();
            if self.peek()?.is_none() {
                return Ok(());
            }
            self.statement()?;
        }
    }

    fn statement(&mut self) -> Result<()> {
        let line = self.line();
        let word = self.ident()?;
        match word.as_str() {
            "include" => {
                let file = match self.next()? {
                    Tok::Str(s) => s,
                    other => {
                        return self.err(format!("expected a file name in quotes, found {other}"))
                    }
                };
                if file != "qelib1.inc" {
                    return Err(QsimError::Parse {
                        line,
                        message: format!(
                            "cannot include {file:?}: only \"qelib1.inc\" is supported (its gates are built in)"
                        ),
                    });
                }
                self.expect_sym(";")
            }
            "qreg" | "creg" => {
                let name = self.ident()?;
                self.expect_sym("[")?;
                let Integer { value, text } = self.integer()?;
                self.expect_sym("]")?;
                self.expect_sym(";")?;
                if self.qregs.contains_key(&name) || self.cregs.contains_key(&name) {
                    return Err(QsimError::Parse {
                        line,
                        message: format!("register {name:?} is declared twice"),
                    });
                }
                let (total, max, kind) = if word == "qreg" {
                    (self.circuit.num_qubits, MAX_QUBITS, "qubits")
                } else {
                    (self.circuit.num_clbits, MAX_CLBITS, "classical bits")
                };
                let Some(size) = value
                    .filter(|&v| v <= (max - total) as u64)
                    .map(|v| v as usize)
                else {
                    return Err(QsimError::Parse {
                        line,
                        message: format!(
                            "register {name:?} of {text} {kind} makes more than {max} {kind} in \
                             all: at most {max} are supported"
                        ),
                    });
                };
                self.keep_statement(line)?;
                if word == "qreg" {
                    self.qregs.insert(name, (self.circuit.num_qubits, size));
                    self.circuit.num_qubits += size;
                    self.measured.resize(self.circuit.num_qubits, false);
                } else {
                    self.circuit.classical_registers.push(ClassicalRegister {
                        name: name.clone(),
                        first: self.circuit.num_clbits,
                        size,
                    });
                    self.cregs.insert(name, (self.circuit.num_clbits, size));
                    self.circuit.num_clbits += size;
                }
                Ok(())
            }
            "gate" => self.gate_definition(),
            "opaque" => self.opaque_declaration(line),
            "reset" => {
                let q = self.arg()?;
                self.expect_sym(";")?;
                let qs = self.qubits_of(&q, line)?;
                self.reserve(qs.len(), "resets", line)?;
                for q in qs {
                    self.mark_dynamic(line);
                    self.push_operation(Operation::Reset { qubit: q }, line);
                }
                Ok(())
            }
            "if" => self.if_statement(line),
            "barrier" => {
                while !self.is_sym(";")? {
                    self.next()?;
                }
                self.expect_sym(";")
            }
            "measure" => {
                let q = self.arg()?;
                self.expect_sym("->")?;
                let c = self.arg()?;
                self.expect_sym(";")?;
                let qs = self.qubits_of(&q, line)?;
                let cs = self.clbits_of(&c, line)?;
                if qs.len() != cs.len() {
                    return Err(QsimError::Parse {
                        line,
                        message: format!(
                            "measure of {} qubits into {} bits: the sizes must match",
                            qs.len(),
                            cs.len()
                        ),
                    });
                }
                self.reserve(qs.len(), "measurements", line)?;
                for (q, c) in qs.into_iter().zip(cs) {
                    self.measured[q] = true;
                    self.circuit.measurements.push((q, c));
                    self.push_operation(Operation::Measure { qubit: q, clbit: c }, line);
                }
                Ok(())
            }
            _ => self.gate_call(word, line),
        }
    }

    /// `if(creg==n) OPERATION;`: a gate call, `measure` or `reset`, run only when the whole
    /// register reads `n` (bit 0 least significant), as in OpenQASM 2.0. Also read, for what
    /// OpenQASM 3 writes (`if (c[0])`, `if (c != 2)`, `else`): one bit of a register
    /// (`if(c[i]==b)`) and `!=`.
    fn if_statement(&mut self, line: usize) -> Result<()> {
        self.expect_sym("(")?;
        let name = self.ident()?;
        let bit = if self.is_sym("[")? {
            self.next()?;
            let i = self.integer()?;
            self.expect_sym("]")?;
            Some(i)
        } else {
            None
        };
        let negated = if self.is_sym("!=")? {
            self.next()?;
            true
        } else {
            self.expect_sym("==")?;
            false
        };
        let Integer { value, text } = self.integer()?;
        self.expect_sym(")")?;
        let op = if negated { "!=" } else { "==" };
        let lhs = match &bit {
            Some(i) => format!("{name}[{}]", i.text),
            None => name.clone(),
        };
        let &(first, size) = self.cregs.get(&name).ok_or_else(|| QsimError::Parse {
            line,
            message: format!(
                "if({lhs}{op}{text}): no classical register named {name:?} is declared (declare \
                 it with `creg {name}[N];` before the `if`)"
            ),
        })?;
        let (first, size) = match bit.map(|i| i.value) {
            Some(Some(i)) if i < size as u64 => (first + i as usize, 1),
            Some(_) => {
                let numbered = match size {
                    0 => String::new(),
                    s => format!(", numbered 0 to {}", s - 1),
                };
                return Err(QsimError::Parse {
                    line,
                    message: format!("if({lhs}{op}{text}): {name} has {size} bits{numbered}"),
                });
            }
            None => (first, size),
        };
        let value = match value {
            Some(v) if size >= 64 || v >> size == 0 => v,
            _ if size < 64 => {
                return Err(QsimError::Parse {
                    line,
                    message: format!(
                        "if({lhs}{op}{text}): {lhs} has {size} bits, so it holds 0 to {}: the \
                         value can never match",
                        (1u128 << size) - 1
                    ),
                })
            }
            _ => {
                return Err(QsimError::Parse {
                    line,
                    message: format!(
                        "if({lhs}{op}{text}): a condition compares at most 64 bits, so its \
                         value must be below 2^64: compare a register of at most 64 bits, or one \
                         bit of {name}"
                    ),
                })
            }
        };
        let word_line = self.line();
        let word = self.ident()?;
        if matches!(
            word.as_str(),
            "if" | "qreg" | "creg" | "gate" | "opaque" | "include" | "barrier" | "OPENQASM"
        ) {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "if({lhs}{op}{text}) is followed by `{word}`: only a gate, `measure` or \
                     `reset` can be conditioned"
                ),
            });
        }
        self.mark_dynamic(line);
        self.condition = Some(Condition {
            first,
            size,
            value,
            negated,
        });
        // The statement reader takes its first word from the tokens: put it back. It cannot be
        // another `if` (refused above), so this does not nest.
        self.ahead.push_front(Lexed {
            tok: Tok::Ident(word),
            line: word_line,
            // Counted already, in this statement.
            bytes: 0,
        });
        let done = self.statement();
        self.condition = None;
        done
    }

    fn mark_dynamic(&mut self, line: usize) {
        self.circuit.dynamic.get_or_insert(line);
    }

    fn push_operation(&mut self, operation: Operation, line: usize) {
        if let Operation::Reset { qubit } = operation {
            // A reset undoes nothing that was measured: the qubit may be used again.
            self.measured[qubit] = false;
        }
        self.circuit.instructions.push(Instruction {
            operation,
            condition: self.condition,
            line,
        });
    }

    /// `opaque NAME(params) args;`: accepted for a gate Qiskit's reader has built in (as it
    /// does, taking its own gate; `qasm2.dumps` declares `delay` so), refused otherwise, since
    /// an opaque gate has no definition to simulate.
    fn opaque_declaration(&mut self, line: usize) -> Result<()> {
        let name = self.ident()?;
        let mut params = 0;
        if self.is_sym("(")? {
            self.bump();
            while !self.is_sym(")")? {
                self.ident()?;
                params += 1;
                if !self.is_sym(")")? {
                    self.expect_sym(",")?;
                }
            }
            self.expect_sym(")")?;
        }
        let mut args = 1;
        self.ident()?;
        while self.is_sym(",")? {
            self.bump();
            self.ident()?;
            args += 1;
        }
        self.expect_sym(";")?;
        match STANDARD_GATES.iter().find(|(n, _, _)| *n == name) {
            Some(&(_, p, q)) if (p, q) == (params, args) => Ok(()),
            Some(&(_, p, q)) => Err(QsimError::Parse {
                line,
                message: format!(
                    "opaque gate {name:?} is declared with {params} parameters and {args} \
                     qubits, but the standard {name:?} has {p} and {q}: rename it"
                ),
            }),
            None => Err(QsimError::Parse {
                line,
                message: format!(
                    "opaque gate {name:?} has no definition and cannot be simulated: define it \
                     with `gate` (only Qiskit's built-in gates, such as `delay`, may be declared \
                     opaque)"
                ),
            }),
        }
    }

    fn gate_definition(&mut self) -> Result<()> {
        let line = self.line();
        let name = self.ident()?;
        let mut params = Vec::new();
        if self.is_sym("(")? {
            self.bump();
            while !self.is_sym(")")? {
                params.push(self.ident()?);
                if !self.is_sym(")")? {
                    self.expect_sym(",")?;
                }
            }
            self.expect_sym(")")?;
        }
        let mut args = vec![self.ident()?];
        while self.is_sym(",")? {
            self.bump();
            args.push(self.ident()?);
        }
        self.expect_sym("{")?;
        let mut body = Vec::new();
        let (mut cost, mut depth) = (0u64, 1usize);
        while !self.is_sym("}")? {
            let call_line = self.line();
            let gate = self.ident()?;
            if gate == "barrier" {
                while !self.is_sym(";")? {
                    self.next()?;
                }
                self.expect_sym(";")?;
                continue;
            }
            let exprs = self.param_list()?;
            let mut call_args = vec![self.ident()?];
            while self.is_sym(",")? {
                self.bump();
                call_args.push(self.ident()?);
            }
            self.expect_sym(";")?;
            if let Some(a) = call_args.iter().find(|a| !args.contains(a)) {
                return Err(QsimError::Parse {
                    line: call_line,
                    message: format!("{a:?} is not an argument of gate {name:?}"),
                });
            }
            self.check_known(&gate, exprs.len(), call_args.len(), call_line)?;
            let (callee_cost, callee_depth) =
                self.defs.get(&gate).map_or((1, 0), |d| (d.cost, d.depth));
            cost = cost.saturating_add(callee_cost);
            depth = depth.max(callee_depth + 1);
            if depth > MAX_GATE_DEPTH {
                return Err(QsimError::Parse {
                    line: call_line,
                    message: format!(
                        "gate {name:?} nests definitions more than {MAX_GATE_DEPTH} deep (each \
                         calling the one before): flatten some of them"
                    ),
                });
            }
            body.push(BodyCall {
                def: self.defs.get(&gate).cloned(),
                name: gate,
                params: exprs,
                args: call_args,
                line: call_line,
            });
        }
        self.expect_sym("}")?;
        if let Some(&(_, p, q)) = STANDARD_GATES.iter().find(|(n, _, _)| *n == name) {
            // qelib1's gates and the others Qiskit's reader has built in keep their built-in
            // meaning when a program defines them again (some exporters do), as in Qiskit
            // (`QuantumCircuit.from_qasm_str`), which also refuses a definition whose shape
            // differs. Names in EXTRA_GATES fall through: the program's definition wins.
            if p != params.len() || q != args.len() {
                return Err(QsimError::Parse {
                    line,
                    message: format!(
                        "gate {name:?} is defined with {} parameters and {} qubits, but the \
                         standard {name:?} has {p} and {q}: rename the definition",
                        params.len(),
                        args.len()
                    ),
                });
            }
            return Ok(());
        }
        if self.defs.contains_key(&name) {
            return Err(QsimError::Parse {
                line,
                message: format!("gate {name:?} is defined twice"),
            });
        }
        let def = Rc::new(GateDef {
            params,
            args,
            body,
            // An empty expansion still counts one, so that calling it is bounded work.
            cost: cost.max(1),
            depth,
        });
        let same_shape = builtin(&name) == Some((0, def.args.len()));
        if let Some(builtin) = standard_matrix(&name, &[]).filter(|_| same_shape) {
            // A definition of one of EXTRA_GATES without parameters that is that gate up to a
            // global phase is Qiskit's gate as `qasm2.dumps` writes it: a `gate` block cannot
            // carry the phase of Qiskit's definition (ecr's is -pi/4). Keep the built-in, with
            // the phase, as Aer does and as the exported circuit had it; any other definition
            // of the name is the program's own gate and wins.
            if let Some(defined) = self.definition_unitary(&name, &def, line)? {
                if same_up_to_phase(&defined, &builtin) {
                    return Ok(());
                }
            }
        }
        self.keep_statement(line)?;
        self.defs.insert(name, def);
        Ok(())
    }

    /// The unitary of a definition without parameters, on its arguments in order; `None` when it
    /// expands to more than 64 gates (then it is not compared). Qiskit's definitions of these
    /// gates take at most 18; the bound keeps a program of many such definitions cheap to read.
    fn definition_unitary(
        &mut self,
        name: &str,
        def: &Rc<GateDef>,
        line: usize,
    ) -> Result<Option<Matrix>> {
        if def.cost > 64 || !def.params.is_empty() {
            return Ok(None);
        }
        let k = def.args.len();
        let qubits: Vec<usize> = (0..k).collect();
        // Expanded on qubits 0..k of a scratch list, then the parser's state is put back.
        let gates = std::mem::take(&mut self.circuit.gates);
        let instructions = std::mem::take(&mut self.circuit.instructions);
        let dynamic = self.circuit.dynamic;
        let condition = self.condition.take();
        let measured = std::mem::replace(&mut self.measured, vec![false; k]);
        let expanded = self.apply(name, Some(def), &[], &qubits, line);
        let body = std::mem::replace(&mut self.circuit.gates, gates);
        self.circuit.instructions = instructions;
        self.circuit.dynamic = dynamic;
        self.condition = condition;
        self.measured = measured;
        expanded?;
        let ops: Vec<(Matrix, &[usize])> = body
            .iter()
            .map(|g| (g.matrix.clone(), g.qubits.as_slice()))
            .collect();
        Ok(Some(gates::compose(k, &ops)))
    }

    fn check_known(&self, gate: &str, nparams: usize, nargs: usize, line: usize) -> Result<()> {
        // A definition in the program comes first: built-ins of the same name are only those
        // that a program cannot redefine (see gate_definition) or EXTRA_GATES, which it can.
        let (p, q) = if let Some(def) = self.defs.get(gate) {
            (def.params.len(), def.args.len())
        } else if let Some(pq) = builtin(gate) {
            pq
        } else {
            let known: Vec<&str> = STANDARD_GATES
                .iter()
                .chain(EXTRA_GATES)
                .map(|(n, _, _)| *n)
                .collect();
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "unsupported gate {gate:?}: define it with `gate` or use one of the \
                     standard gates: {}",
                    known.join(" ")
                ),
            });
        };
        if p != nparams || q != nargs {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "gate {gate:?} takes {p} parameters and {q} qubits, given {nparams} and {nargs}"
                ),
            });
        }
        Ok(())
    }

    fn param_list(&mut self) -> Result<Vec<Expr>> {
        let mut exprs = Vec::new();
        if self.is_sym("(")? {
            self.bump();
            while !self.is_sym(")")? {
                exprs.push(self.expr()?);
                if !self.is_sym(")")? {
                    self.expect_sym(",")?;
                }
            }
            self.expect_sym(")")?;
        }
        Ok(exprs)
    }

    fn expr(&mut self) -> Result<Expr> {
        let mut code = Vec::new();
        self.sum(&mut code)?;
        Ok(Expr(code))
    }

    /// One more level of nesting in an expression; refused past [`MAX_EXPR_DEPTH`] so that a
    /// program of nested parentheses or signs cannot overflow the parser's stack.
    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return self.err(format!(
                "the expression is nested more than {MAX_EXPR_DEPTH} levels deep \
                 (parentheses, signs, powers or function calls): simplify it"
            ));
        }
        Ok(())
    }

    fn sum(&mut self, out: &mut Vec<Code>) -> Result<()> {
        self.left_associative(out, ['+', '-'], Self::term)
    }

    fn term(&mut self, out: &mut Vec<Code>) -> Result<()> {
        self.left_associative(out, ['*', '/'], Self::factor)
    }

    /// One level of left-associative binary operators `ops` between operands of the next level
    /// up (`operand`): `a op b op c` is `(a op b) op c`.
    fn left_associative(
        &mut self,
        out: &mut Vec<Code>,
        ops: [char; 2],
        operand: fn(&mut Self, &mut Vec<Code>) -> Result<()>,
    ) -> Result<()> {
        operand(self, out)?;
        loop {
            let op = if self.is_sym(ops[0].encode_utf8(&mut [0; 4]))? {
                ops[0]
            } else if self.is_sym(ops[1].encode_utf8(&mut [0; 4]))? {
                ops[1]
            } else {
                return Ok(());
            };
            self.bump();
            operand(self, out)?;
            out.push(Code::Bin(op));
        }
    }

    fn factor(&mut self, out: &mut Vec<Code>) -> Result<()> {
        self.unary(out)?;
        if self.is_sym("^")? {
            self.bump();
            // Right-associative: a^b^c is a^(b^c), one level deeper per `^`.
            self.enter()?;
            self.factor(out)?;
            self.depth -= 1;
            out.push(Code::Bin('^'));
        }
        Ok(())
    }

    fn unary(&mut self, out: &mut Vec<Code>) -> Result<()> {
        let line = self.line();
        match self.next()? {
            Tok::Sym("-") => {
                self.enter()?;
                self.unary(out)?;
                self.depth -= 1;
                out.push(Code::Neg);
            }
            Tok::Sym("+") => {
                self.enter()?;
                self.unary(out)?;
                self.depth -= 1;
            }
            Tok::Sym("(") => {
                self.enter()?;
                self.sum(out)?;
                self.depth -= 1;
                self.expect_sym(")")?;
            }
            Tok::Number(n, _) => out.push(Code::Num(n)),
            Tok::Ident(s) if s == "pi" => out.push(Code::Num(PI)),
            Tok::Ident(s)
                if matches!(s.as_str(), "sin" | "cos" | "tan" | "exp" | "ln" | "sqrt") =>
            {
                self.expect_sym("(")?;
                self.enter()?;
                self.sum(out)?;
                self.depth -= 1;
                self.expect_sym(")")?;
                out.push(Code::Call(s));
            }
            Tok::Ident(s) => out.push(Code::Var(s)),
            other => {
                return Err(QsimError::Parse {
                    line,
                    message: format!("expected a number or an expression, found {other}"),
                })
            }
        }
        Ok(())
    }

    fn arg(&mut self) -> Result<Arg> {
        let name = self.ident()?;
        if self.is_sym("[")? {
            self.bump();
            let i = self.integer()?;
            self.expect_sym("]")?;
            return Ok(Arg::Bit(name, i));
        }
        Ok(Arg::Register(name))
    }

    fn resolve(
        regs: &HashMap<String, (usize, usize)>,
        kind: &str,
        arg: &Arg,
        line: usize,
    ) -> Result<Vec<usize>> {
        let (name, index) = match arg {
            Arg::Register(n) => (n, None),
            Arg::Bit(n, i) => (n, Some(i)),
        };
        let &(start, size) = regs.get(name).ok_or_else(|| QsimError::Parse {
            line,
            message: format!("no {kind} register named {name:?} is declared"),
        })?;
        match index {
            None => Ok((start..start + size).collect()),
            Some(Integer { value: Some(i), .. }) if *i < size as u64 => {
                Ok(vec![start + *i as usize])
            }
            Some(Integer { text, .. }) => Err(QsimError::Parse {
                line,
                message: format!("{name}[{text}] is out of range: {name} has {size} bits"),
            }),
        }
    }

    fn qubits_of(&self, arg: &Arg, line: usize) -> Result<Vec<usize>> {
        Self::resolve(&self.qregs, "quantum", arg, line)
    }

    fn clbits_of(&self, arg: &Arg, line: usize) -> Result<Vec<usize>> {
        Self::resolve(&self.cregs, "classical", arg, line)
    }

    fn gate_call(&mut self, name: String, line: usize) -> Result<()> {
        let exprs = self.param_list()?;
        let mut args = vec![self.arg()?];
        while self.is_sym(",")? {
            self.bump();
            args.push(self.arg()?);
        }
        self.expect_sym(";")?;
        self.check_known(&name, exprs.len(), args.len(), line)?;
        let params = exprs
            .iter()
            .map(|e| e.eval(&[], &[], line))
            .collect::<Result<Vec<f64>, _>>()?;
        let resolved = args
            .iter()
            .map(|a| self.qubits_of(a, line))
            .collect::<Result<Vec<_>, _>>()?;
        // Broadcasting: whole registers are applied element by element; they must agree in size.
        let width = resolved
            .iter()
            .map(Vec::len)
            .filter(|&l| l > 1)
            .max()
            .unwrap_or(1);
        if resolved.iter().any(|r| r.len() != 1 && r.len() != width) {
            return Err(QsimError::Parse {
                line,
                message: format!("registers of different sizes given to {name:?}"),
            });
        }
        // Known before anything is expanded: a definition's cost was computed when it was defined.
        let each = self.defs.get(&name).map_or(1, |d| d.cost);
        let cost = each.saturating_mul(width as u64);
        let max = self.options.max_gates;
        if cost > max - self.expanded {
            return Err(QsimError::Parse {
                line,
                message: format!(
                    "this statement expands to {cost} gates ({name:?}: {each} each), which takes \
                     the circuit past its limit of {max} gates ({} before it): split the \
                     circuit, simplify its definitions or raise the limit (--max-gates)",
                    self.expanded
                ),
            });
        }
        self.expanded += cost;
        let def = self.defs.get(&name).cloned();
        for i in 0..width {
            let qubits: Vec<usize> = resolved
                .iter()
                .map(|r| if r.len() == 1 { r[0] } else { r[i] })
                .collect();
            self.apply(&name, def.as_ref(), &params, &qubits, line)?;
        }
        Ok(())
    }

    /// Apply gate `name`: the program's definition `def`, or the built-in when `def` is `None`.
    fn apply(
        &mut self,
        name: &str,
        def: Option<&Rc<GateDef>>,
        params: &[f64],
        qubits: &[usize],
        line: usize,
    ) -> Result<()> {
        for (i, q) in qubits.iter().enumerate() {
            if qubits[..i].contains(q) {
                return Err(QsimError::Parse {
                    line,
                    message: format!("gate {name:?} is given qubit {q} twice"),
                });
            }
            if self.measured[*q] {
                // Mid-circuit measurement: the outcome decides what the rest of the shot sees.
                self.mark_dynamic(line);
            }
        }
        let Some(def) = def else {
            let matrix = standard_matrix(name, params).ok_or_else(|| QsimError::Parse {
                line,
                message: format!("unsupported gate {name:?}"),
            })?;
            self.push_operation(Operation::Gate(self.circuit.gates.len()), line);
            self.circuit.gates.push(Gate {
                name: name.to_string(),
                qubits: qubits.to_vec(),
                matrix,
                line,
            });
            return Ok(());
        };
        for call in &def.body {
            let p = call
                .params
                .iter()
                .map(|e| e.eval(&def.params, params, call.line))
                .collect::<Result<Vec<f64>, _>>()?;
            let q: Vec<usize> = call
                .args
                .iter()
                .map(|a| {
                    qubits[def
                        .args
                        .iter()
                        .position(|d| d == a)
                        .expect("checked at definition")]
                })
                .collect();
            // Gates made by a definition carry the line of the call, where the user can look.
            self.apply(&call.name, call.def.as_ref(), &p, &q, line)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(src: &str) -> (usize, String) {
        match parse(src) {
            Err(QsimError::Parse { line, message }) => (line, message),
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    #[test]
    fn parses_registers_broadcast_and_definitions() {
        let c = parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg a[2];\nqreg b[2];\ncreg c[4];\n\
             gate my(theta) x, y { rz(theta/2) x; cx x, y; }\nh a;\ncx a, b;\nmy(pi) a[1], b[0];\n\
             barrier a, b;\nmeasure a -> c[0];\n",
        );
        // `measure a -> c[0]` measures two qubits into one bit.
        assert!(c.is_err());
        let c = parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg a[2];\nqreg b[2];\ncreg c[4];\n\
             gate my(theta) x, y { rz(theta/2) x; cx x, y; }\nh a;\ncx a, b;\nmy(-pi*2^2) a[1], b[0];\n\
             barrier a, b;\nmeasure b -> c[2];\n"
                .replace("measure b -> c[2]", "measure b[1] -> c[2]")
                .as_str(),
        )
        .unwrap();
        assert_eq!(c.num_qubits, 4);
        assert_eq!(c.num_clbits, 4);
        let names: Vec<&str> = c.gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["h", "h", "cx", "cx", "rz", "cx"]);
        assert_eq!(c.gates[3].qubits, [1, 3]);
        assert_eq!(c.gates[4].qubits, [1]);
        assert_eq!(c.gates[4].line, 9);
        assert_eq!(c.measurements, [(3, 2)]);
    }

    #[test]
    fn reads_qiskits_openqasm3_subset_line_for_line() {
        let src = "OPENQASM 3.0;\ninclude \"stdgates.inc\";\nbit[2] c;\nqubit[2] q;\n\
                   h q[0];\nc[0] = measure q[0];\nif (c == 1) {\n  x q[1];\n  c[1] = measure q[1];\n}\n\
                   reset q[0];\nphase(0.5) q[0];\n";
        let c = parse(src).unwrap();
        assert_eq!(c.num_qubits, 2);
        // The first conditioned statement, inside the `if` block.
        assert_eq!(c.dynamic, Some(8));
        let ops: Vec<(Operation, Option<Condition>)> = c
            .instructions
            .iter()
            .map(|i| (i.operation, i.condition))
            .collect();
        let c1 = Some(Condition {
            first: 0,
            size: 2,
            value: 1,
            negated: false,
        });
        assert_eq!(
            ops,
            [
                (Operation::Gate(0), None),
                (Operation::Measure { qubit: 0, clbit: 0 }, None),
                (Operation::Gate(1), c1),
                (Operation::Measure { qubit: 1, clbit: 1 }, c1),
                (Operation::Reset { qubit: 0 }, None),
                (Operation::Gate(2), None),
            ]
        );
        assert_eq!(c.gates[2].name, "p");
        // Errors keep their lines.
        let (line, _) = line_of("OPENQASM 3.0;\nqubit[1] q;\n\nfoo q[0];\n");
        assert_eq!(line, 4);
    }

    #[test]
    fn reads_openqasm3_conditions_on_one_bit_and_else_blocks() {
        // As qiskit.qasm3.dumps writes `if_test((clbit, 1))`, `if_test((clbit, 0))` with an
        // `else`, and a register compared with `!=`.
        let src = "OPENQASM 3.0;\ninclude \"stdgates.inc\";\nbit[3] c;\nqubit[2] q;\n\
                   c[1] = measure q[0];\nif (c[1]) {\n  x q[1];\n}\nif (!c[2]) {\n  h q[1];\n\
                   } else {\n  z q[1];\n}\nif (c != 5) x q[0];\nif (c[0] == false) {\n  y q[0];\n}\n\
                   else {\n  s q[0];\n}\n";
        let c = parse(src).unwrap();
        let conds: Vec<Option<(usize, usize, u64, bool)>> = c
            .instructions
            .iter()
            .map(|i| i.condition.map(|c| (c.first, c.size, c.value, c.negated)))
            .collect();
        assert_eq!(
            conds,
            [
                None,
                Some((1, 1, 1, false)),
                Some((2, 1, 0, false)),
                Some((2, 1, 0, true)),
                Some((0, 3, 5, true)),
                Some((0, 1, 0, false)),
                Some((0, 1, 0, true)),
            ]
        );
        let bit = c.instructions[1].condition.unwrap();
        assert!(bit.holds(&[false, true, false]) && !bit.holds(&[true, false, true]));
        let not_five = c.instructions[4].condition.unwrap();
        assert!(!not_five.holds(&[true, false, true]) && not_five.holds(&[true, true, true]));
        // What is not supported says so, on its line, with the form that is.
        let head = "OPENQASM 3.0;\nqubit[1] q;\nbit[2] c;\n";
        for (body, line, says) in [
            ("if (c) {\n", 4, "a bit alone"),
            ("if (c[0] && c[1]) {\n", 4, "compared with"),
            ("if (c[0]) {\nif (c[1]) {\n", 5, "nested"),
            ("x q[0];\n} else {\n", 5, "`else` without"),
            ("if (c[2]) x q[0];\n", 4, "numbered 0 to 1"),
            ("if (c[0] == 2) x q[0];\n", 4, "never match"),
        ] {
            let (at, msg) = line_of(&format!("{head}{body}"));
            assert_eq!(at, line, "{body:?}: {msg}");
            assert!(msg.contains(says), "{body:?}: {msg}");
        }
    }

    #[test]
    fn reads_dynamic_operations_in_program_order() {
        let c = parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nqreg q[2];\ncreg a[1];\ncreg b[2];\n\
             h q[0];\nmeasure q[0] -> a[0];\nif(a==1) x q[1];\nreset q;\nh q[0];\n\
             if(b==2) measure q[1] -> b[1];\n",
        )
        .unwrap();
        assert_eq!(c.dynamic, Some(8));
        let ops: Vec<Operation> = c.instructions.iter().map(|i| i.operation).collect();
        assert_eq!(
            ops,
            [
                Operation::Gate(0),
                Operation::Measure { qubit: 0, clbit: 0 },
                Operation::Gate(1),
                Operation::Reset { qubit: 0 },
                Operation::Reset { qubit: 1 },
                Operation::Gate(2),
                Operation::Measure { qubit: 1, clbit: 2 },
            ]
        );
        let a1 = Condition {
            first: 0,
            size: 1,
            value: 1,
            negated: false,
        };
        assert_eq!(c.instructions[2].condition, Some(a1));
        assert_eq!(c.instructions[3].condition, None);
        let b2 = c.instructions[6].condition.unwrap();
        assert_eq!((b2.first, b2.size, b2.value), (1, 2, 2));
        // Register bit 0 is the least significant: b = 2 is b[1] set, b[0] clear.
        assert!(b2.holds(&[false, false, true]));
        assert!(!b2.holds(&[false, true, false]));
        assert!(a1.holds(&[true, false, false]));
        // A gate after a measurement of its qubit makes the circuit dynamic at that line.
        let c = parse("OPENQASM 2.0;\nqreg q[1];\ncreg c[1];\nmeasure q -> c;\nx q[0];\n").unwrap();
        assert_eq!(c.dynamic, Some(5));
        // Measurements at the end do not.
        let c = parse("OPENQASM 2.0;\nqreg q[2];\ncreg c[2];\nh q[0];\nmeasure q -> c;\n").unwrap();
        assert_eq!(c.dynamic, None);
    }

    #[test]
    fn a_definition_wins_over_an_extra_gate_but_not_over_qelib1() {
        let head = "OPENQASM 2.0;\ninclude \"qelib1.inc\";\n";
        // rzx is not Qiskit's built-in: the program's own meaning of it is used.
        let c = parse(&format!(
            "{head}gate rzx(t) a, b {{ h a; rz(t) b; }}\nqreg q[2];\nrzx(0.5) q[0], q[1];\n"
        ))
        .unwrap();
        let names: Vec<&str> = c.gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["h", "rz"]);
        // A definition made before it keeps calling the built-in.
        let c = parse(&format!(
            "{head}gate two a, b {{ dcx a, b; }}\ngate dcx a, b {{ x a; }}\nqreg q[2];\n\
             two q[0], q[1];\ndcx q[0], q[1];\n"
        ))
        .unwrap();
        let names: Vec<&str> = c.gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["dcx", "x"]);
        // Qiskit's own ecr definition lacks its phase: the built-in, with the phase, is kept.
        let c = parse(&format!(
            "{head}gate ecr q0,q1 {{ s q0; sx q1; cx q0,q1; x q0; }}\nqreg q[2];\necr q[0],q[1];\n"
        ))
        .unwrap();
        assert_eq!(c.gates.len(), 1);
        assert_eq!(c.gates[0].matrix, gates::ecr());
        assert!(!same_up_to_phase(&gates::ecr(), &gates::dcx()));
        // Of another shape it is the program's gate, and it is not expanded to be compared
        // (a 40-qubit unitary would not fit in memory).
        let wide: Vec<String> = (0..40).map(|i| format!("a{i}")).collect();
        let c = parse(&format!(
            "{head}gate ecr {} {{ x a39; }}\nqreg q[40];\necr {};\n",
            wide.join(","),
            (0..40)
                .map(|i| format!("q[{i}]"))
                .collect::<Vec<_>>()
                .join(",")
        ))
        .unwrap();
        assert_eq!(c.gates.len(), 1);
        assert_eq!(c.gates[0].qubits, [39]);
        // qelib1's gates keep their meaning (as in Qiskit), and a definition of another shape is
        // refused, naming the fix.
        let c = parse(&format!("{head}gate x a {{ h a; }}\nqreg q[1];\nx q[0];\n")).unwrap();
        assert_eq!(c.gates[0].matrix, gates::x());
        let (line, msg) = line_of(&format!("{head}gate sx(t) a {{ rx(t) a; }}\n"));
        assert_eq!(line, 3);
        assert!(msg.contains("rename the definition"), "{msg}");
    }

    #[test]
    fn an_opaque_delay_is_qiskits_delay_and_other_opaque_gates_are_refused() {
        // As qasm2.dumps writes a circuit with a delay.
        let c = parse(
            "OPENQASM 2.0;\ninclude \"qelib1.inc\";\nopaque delay(param0) q0;\nqreg q[1];\n\
             h q[0];\ndelay(100.0) q[0];\n",
        )
        .unwrap();
        assert_eq!(c.gates.len(), 2);
        assert_eq!(c.gates[1].matrix, gates::identity(1));
        let (line, msg) = line_of("OPENQASM 2.0;\nqreg q[1];\nopaque magic(t) a;\n");
        assert_eq!(line, 3);
        assert!(msg.contains("define it with `gate`"), "{msg}");
        let (_, msg) = line_of("OPENQASM 2.0;\nopaque delay a, b;\n");
        assert!(msg.contains("rename it"), "{msg}");
    }

    #[test]
    fn every_built_in_gate_is_a_unitary_of_its_size() {
        for &(name, np, nq) in STANDARD_GATES.iter().chain(EXTRA_GATES) {
            let params: Vec<f64> = (0..np).map(|i| 0.3 + 1.7 * i as f64).collect();
            let m = standard_matrix(name, &params).unwrap_or_else(|| panic!("{name}"));
            assert_eq!(m.qubits(), nq, "{name}");
            assert!(m.is_unitary(1e-12), "{name}");
            assert!(
                standard_matrix(name, &[0.1; 5][..np + 1]).is_none(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_missing_header_is_read_with_a_warning() {
        let c = parse("include \"qelib1.inc\";\nqreg q[1];\nh q[0];\n").unwrap();
        assert_eq!(c.gates.len(), 1);
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("add `OPENQASM 2.0;`"),
            "{:?}",
            c.warnings
        );
        let c = parse("OPENQASM 2.0;\nqreg q[1];\nh q[0];\n").unwrap();
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn counts_keys_are_qiskits_registers_last_declared_first() {
        let c = parse("OPENQASM 2.0;\nqreg q[3];\ncreg a[1];\ncreg b[2];\n").unwrap();
        // a[0] = 1, b[0] = 0, b[1] = 1.
        assert_eq!(c.counts_key(&[true, false, true]), "10 1");
        let c = parse("OPENQASM 2.0;\nqreg q[3];\ncreg c[3];\n").unwrap();
        assert_eq!(c.counts_key(&[true, false, false]), "001");
    }

    #[test]
    fn errors_name_the_line() {
        for (text, line, says) in [
            (
                "OPENQASM 2.0;\nqreg q[2];\nh q[0];\nfoo q[1];\n",
                4,
                "unsupported gate \"foo\"",
            ),
            ("OPENQASM 2.0;\nqreg q[2];\n\ncx q[0] q[1];\n", 4, ""),
            ("OPENQASM 2.0;\nqreg q[2];\nh q[2];\n", 3, "out of range"),
            (
                "OPENQASM 2.0;\nqreg q[2];\nrx q[0];\n",
                3,
                "takes 1 parameters",
            ),
            (
                "OPENQASM 2.0;\nqreg q[1];\nreset r[0];\n",
                3,
                "no quantum register named \"r\"",
            ),
            (
                "OPENQASM 2.0;\nqreg q[1];\nreset q[1];\n",
                3,
                "out of range",
            ),
            (
                "OPENQASM 2.0;\nqreg q[1];\ncreg c[2];\n\nif(d==1) x q[0];\n",
                5,
                "no classical register named \"d\"",
            ),
            (
                "OPENQASM 2.0;\nqreg q[1];\ncreg c[2];\nif(c==4) x q[0];\n",
                4,
                "c has 2 bits, so it holds 0 to 3",
            ),
            (
                "OPENQASM 2.0;\nqreg q[1];\ncreg c[2];\nif(c==1) creg d[1];\n",
                4,
                "only a gate",
            ),
            ("OPENQASM 2.0;\nqreg q[1];\nh q[0]\n", 3, "end of program"),
        ] {
            let (at, msg) = line_of(text);
            assert_eq!(at, line, "{text:?}: {msg}");
            assert!(msg.contains(says), "{text:?}: {msg}");
        }
    }
}
