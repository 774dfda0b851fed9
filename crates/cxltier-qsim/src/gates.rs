//! Gate matrices: dense complex unitaries on `k` qubits, the qelib1 gates with Qiskit's phase
//! conventions, control, products, and the expansion that fusion needs.

use std::ops::{Add, Mul};

/// A complex number in f64; matrices are always built in double precision.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Complex {
    /// Real part.
    pub re: f64,
    /// Imaginary part.
    pub im: f64,
}

impl Complex {
    /// `re + i im`.
    pub const fn new(re: f64, im: f64) -> Complex {
        Complex { re, im }
    }
    /// `e^{i phi}`.
    pub fn expi(phi: f64) -> Complex {
        Complex::new(phi.cos(), phi.sin())
    }
    /// The complex conjugate.
    pub fn conj(self) -> Complex {
        Complex::new(self.re, -self.im)
    }
    /// `|z|^2`.
    pub fn norm_sqr(self) -> f64 {
        self.re * self.re + self.im * self.im
    }
}

impl Add for Complex {
    type Output = Complex;
    fn add(self, o: Complex) -> Complex {
        Complex::new(self.re + o.re, self.im + o.im)
    }
}

impl Mul for Complex {
    type Output = Complex;
    fn mul(self, o: Complex) -> Complex {
        Complex::new(
            self.re * o.re - self.im * o.im,
            self.re * o.im + self.im * o.re,
        )
    }
}

const ZERO: Complex = Complex::new(0.0, 0.0);
const ONE: Complex = Complex::new(1.0, 0.0);

/// A dense `dim x dim` complex matrix, row-major, `dim = 2^qubits`.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    qubits: usize,
    data: Vec<Complex>,
}

impl Matrix {
    /// A matrix on `qubits` qubits from row-major entries; panics on a wrong length.
    pub fn from_rows(qubits: usize, data: Vec<Complex>) -> Matrix {
        assert_eq!(data.len(), 1 << (2 * qubits), "a {qubits}-qubit matrix");
        Matrix { qubits, data }
    }
    /// The number of qubits it acts on.
    pub fn qubits(&self) -> usize {
        self.qubits
    }
    /// `2^qubits`.
    pub fn dim(&self) -> usize {
        1 << self.qubits
    }
    /// Entry `(row, col)`.
    pub fn at(&self, row: usize, col: usize) -> Complex {
        self.data[row * self.dim() + col]
    }
    /// The row-major entries.
    pub fn entries(&self) -> &[Complex] {
        &self.data
    }
    /// The conjugate transpose.
    pub fn adjoint(&self) -> Matrix {
        let d = self.dim();
        let mut data = vec![ZERO; d * d];
        for r in 0..d {
            for c in 0..d {
                data[c * d + r] = self.at(r, c).conj();
            }
        }
        Matrix::from_rows(self.qubits, data)
    }
    /// `e^{i phi}` times the matrix.
    pub fn scaled_phase(&self, phi: f64) -> Matrix {
        let z = Complex::expi(phi);
        Matrix::from_rows(self.qubits, self.data.iter().map(|&a| a * z).collect())
    }
    /// The product `self * other` (apply `other` first).
    pub fn times(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.qubits, other.qubits);
        let d = self.dim();
        let mut data = vec![ZERO; d * d];
        for r in 0..d {
            for k in 0..d {
                let a = self.at(r, k);
                if a == ZERO {
                    continue;
                }
                for c in 0..d {
                    data[r * d + c] = data[r * d + c] + a * other.at(k, c);
                }
            }
        }
        Matrix::from_rows(self.qubits, data)
    }
    /// This gate, acting on `qubits` (bit `i` of its index is `qubits[i]`), written as a matrix on
    /// `onto` (a superset of `qubits`) that is the identity on the other qubits.
    pub fn expand(&self, qubits: &[usize], onto: &[usize]) -> Matrix {
        let pos: Vec<usize> = qubits
            .iter()
            .map(|q| {
                onto.iter()
                    .position(|o| o == q)
                    .expect("onto covers the gate's qubits")
            })
            .collect();
        let mask: usize = pos.iter().map(|p| 1 << p).sum();
        let sub = |i: usize| -> usize {
            pos.iter()
                .enumerate()
                .map(|(b, p)| ((i >> p) & 1) << b)
                .sum()
        };
        let d = 1 << onto.len();
        let mut data = vec![ZERO; d * d];
        for r in 0..d {
            for c in 0..d {
                if r & !mask == c & !mask {
                    data[r * d + c] = self.at(sub(r), sub(c));
                }
            }
        }
        Matrix::from_rows(onto.len(), data)
    }
    /// Whether it is unitary within `tol` (a check on matrices built in code).
    pub fn is_unitary(&self, tol: f64) -> bool {
        let p = self.adjoint().times(self);
        let d = self.dim();
        (0..d).all(|r| {
            (0..d).all(|c| {
                let want = if r == c { ONE } else { ZERO };
                let got = p.at(r, c);
                (got.re - want.re).abs() < tol && (got.im - want.im).abs() < tol
            })
        })
    }
}

fn m1(a: Complex, b: Complex, c: Complex, d: Complex) -> Matrix {
    Matrix::from_rows(1, vec![a, b, c, d])
}

/// The identity on `qubits` qubits.
pub fn identity(qubits: usize) -> Matrix {
    let d = 1 << qubits;
    let mut data = vec![ZERO; d * d];
    for i in 0..d {
        data[i * d + i] = ONE;
    }
    Matrix::from_rows(qubits, data)
}

/// Qiskit's `U(theta, phi, lambda)`.
pub fn u3(theta: f64, phi: f64, lambda: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    m1(
        Complex::new(c, 0.0),
        Complex::expi(lambda) * Complex::new(-s, 0.0),
        Complex::expi(phi) * Complex::new(s, 0.0),
        Complex::expi(phi + lambda) * Complex::new(c, 0.0),
    )
}

/// `diag(1, e^{i lambda})` (`p`, `u1`; `z`, `s`, `t` and their inverses are special cases).
pub fn phase(lambda: f64) -> Matrix {
    m1(ONE, ZERO, ZERO, Complex::expi(lambda))
}

/// Pauli X.
pub fn x() -> Matrix {
    m1(ZERO, ONE, ONE, ZERO)
}

/// Pauli Y.
pub fn y() -> Matrix {
    m1(ZERO, Complex::new(0.0, -1.0), Complex::new(0.0, 1.0), ZERO)
}

/// Hadamard.
pub fn h() -> Matrix {
    let r = Complex::new(std::f64::consts::FRAC_1_SQRT_2, 0.0);
    m1(r, r, r, Complex::new(-r.re, 0.0))
}

/// Square root of X.
pub fn sx() -> Matrix {
    let a = Complex::new(0.5, 0.5);
    let b = Complex::new(0.5, -0.5);
    m1(a, b, b, a)
}

/// Rotation about X.
pub fn rx(theta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    m1(
        Complex::new(c, 0.0),
        Complex::new(0.0, -s),
        Complex::new(0.0, -s),
        Complex::new(c, 0.0),
    )
}

/// Rotation about Y.
pub fn ry(theta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    m1(
        Complex::new(c, 0.0),
        Complex::new(-s, 0.0),
        Complex::new(s, 0.0),
        Complex::new(c, 0.0),
    )
}

/// Rotation about Z: `diag(e^{-i theta/2}, e^{i theta/2})`.
pub fn rz(theta: f64) -> Matrix {
    m1(
        Complex::expi(-theta / 2.0),
        ZERO,
        ZERO,
        Complex::expi(theta / 2.0),
    )
}

/// SWAP.
pub fn swap() -> Matrix {
    let mut data = vec![ZERO; 16];
    for (r, c) in [(0, 0), (1, 2), (2, 1), (3, 3)] {
        data[r * 4 + c] = ONE;
    }
    Matrix::from_rows(2, data)
}

/// `exp(-i theta/2 X⊗X)`.
pub fn rxx(theta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    let mut data = vec![ZERO; 16];
    for i in 0..4 {
        data[i * 4 + i] = Complex::new(c, 0.0);
        data[i * 4 + (3 - i)] = Complex::new(0.0, -s);
    }
    Matrix::from_rows(2, data)
}

/// `exp(-i theta/2 Z⊗Z)`.
pub fn rzz(theta: f64) -> Matrix {
    let mut data = vec![ZERO; 16];
    for i in 0..4usize {
        let parity = (i.count_ones() % 2) as f64;
        data[i * 4 + i] = Complex::expi(if parity == 0.0 {
            -theta / 2.0
        } else {
            theta / 2.0
        });
    }
    Matrix::from_rows(2, data)
}

/// `u` controlled by `controls` qubits: the controls are the low bits of the index, `u`'s qubits
/// the high ones; `u` acts when every control is 1.
pub fn controlled(u: &Matrix, controls: usize) -> Matrix {
    let k = controls + u.qubits();
    let d = 1 << k;
    let all = (1 << controls) - 1;
    let mut data = vec![ZERO; d * d];
    for r in 0..d {
        for c in 0..d {
            let (rc, cc) = (r & all, c & all);
            data[r * d + c] = if rc != cc {
                ZERO
            } else if rc == all {
                u.at(r >> controls, c >> controls)
            } else if r == c {
                ONE
            } else {
                ZERO
            };
        }
    }
    Matrix::from_rows(k, data)
}

/// The unitary of a small circuit on `qubits` qubits: `ops` applied in order, each a gate and the
/// qubits it acts on (bit `i` of its index is its `i`-th qubit). Gates whose Qiskit definition is a
/// circuit are built this way from that definition, so they carry exactly its global phase.
pub fn compose(qubits: usize, ops: &[(Matrix, &[usize])]) -> Matrix {
    let all: Vec<usize> = (0..qubits).collect();
    ops.iter().fold(identity(qubits), |acc, (gate, on)| {
        gate.expand(on, &all).times(&acc)
    })
}

/// `exp(-i theta/2 Y⊗Y)`, Qiskit's `ryy`.
pub fn ryy(theta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    let mut data = vec![ZERO; 16];
    for i in 0..4 {
        data[i * 4 + i] = Complex::new(c, 0.0);
        // |00> and |11> pick up +i sin, |01> and |10> -i sin (Y⊗Y = -1 on the first pair).
        let sign = if i == 0 || i == 3 { 1.0 } else { -1.0 };
        data[i * 4 + (3 - i)] = Complex::new(0.0, sign * s);
    }
    Matrix::from_rows(2, data)
}

/// Qiskit's `rzx(theta)` on `[control, target]`: `exp(-i theta/2 X⊗Z)` with Z on the first qubit
/// and X on the second, from its definition `h t; cx c,t; rz(theta) t; cx c,t; h t`.
pub fn rzx(theta: f64) -> Matrix {
    let cx = controlled(&x(), 1);
    compose(
        2,
        &[
            (h(), &[1]),
            (cx.clone(), &[0, 1]),
            (rz(theta), &[1]),
            (cx, &[0, 1]),
            (h(), &[1]),
        ],
    )
}

/// Qiskit's echoed cross-resonance gate `ecr`: its definition `s a; sx b; cx a,b; x a` with the
/// definition's global phase of `-pi/4` (which `qasm2.dumps` cannot write into a `gate` block).
pub fn ecr() -> Matrix {
    compose(
        2,
        &[
            (phase(std::f64::consts::FRAC_PI_2), &[0]),
            (sx(), &[1]),
            (controlled(&x(), 1), &[0, 1]),
            (x(), &[0]),
        ],
    )
    .scaled_phase(-std::f64::consts::FRAC_PI_4)
}

/// Two CNOTs back to back, `cx a,b; cx b,a` (Qiskit's `dcx`).
pub fn dcx() -> Matrix {
    let cx = controlled(&x(), 1);
    compose(2, &[(cx.clone(), &[0, 1]), (cx, &[1, 0])])
}

/// `iswap`: swaps `|01>` and `|10>` with a phase of `i`.
pub fn iswap() -> Matrix {
    let mut data = vec![ZERO; 16];
    let i = Complex::new(0.0, 1.0);
    for (r, c, v) in [(0, 0, ONE), (1, 2, i), (2, 1, i), (3, 3, ONE)] {
        data[r * 4 + c] = v;
    }
    Matrix::from_rows(2, data)
}

/// Qiskit's `r(theta, phi)`: rotation by `theta` about `cos(phi) X + sin(phi) Y`.
pub fn r(theta: f64, phi: f64) -> Matrix {
    use std::f64::consts::FRAC_PI_2;
    u3(theta, phi - FRAC_PI_2, FRAC_PI_2 - phi)
}

/// qelib1's `rccx` (Margolus, a Toffoli up to relative phases), from its definition.
pub fn rccx() -> Matrix {
    use std::f64::consts::FRAC_PI_4;
    let cx = controlled(&x(), 1);
    let t = || phase(FRAC_PI_4);
    let tdg = || phase(-FRAC_PI_4);
    compose(
        3,
        &[
            (h(), &[2]),
            (t(), &[2]),
            (cx.clone(), &[1, 2]),
            (tdg(), &[2]),
            (cx.clone(), &[0, 2]),
            (t(), &[2]),
            (cx, &[1, 2]),
            (tdg(), &[2]),
            (h(), &[2]),
        ],
    )
}

/// qelib1's `rc3x` (Qiskit's `rcccx`: three controls, relative phases), from its definition.
pub fn rc3x() -> Matrix {
    use std::f64::consts::FRAC_PI_4;
    let cx = || controlled(&x(), 1);
    let t = || phase(FRAC_PI_4);
    let tdg = || phase(-FRAC_PI_4);
    compose(
        4,
        &[
            (h(), &[3]),
            (t(), &[3]),
            (cx(), &[2, 3]),
            (tdg(), &[3]),
            (h(), &[3]),
            (cx(), &[0, 3]),
            (t(), &[3]),
            (cx(), &[1, 3]),
            (tdg(), &[3]),
            (cx(), &[0, 3]),
            (t(), &[3]),
            (cx(), &[1, 3]),
            (tdg(), &[3]),
            (h(), &[3]),
            (t(), &[3]),
            (cx(), &[2, 3]),
            (tdg(), &[3]),
            (h(), &[3]),
        ],
    )
}

/// Qiskit's `xx_plus_yy(theta, beta)` on `[a, b]`: an XX+YY interaction, with `beta` a phase on
/// the `|01>`/`|10>` transition (Qiskit's matrix, qubit `a` the least significant bit).
pub fn xx_plus_yy(theta: f64, beta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    let mut data = vec![ZERO; 16];
    data[0] = ONE;
    data[15] = ONE;
    data[5] = Complex::new(c, 0.0);
    data[10] = Complex::new(c, 0.0);
    // Row |01> (index 1), column |10> (index 2), and back.
    data[6] = Complex::new(0.0, -s) * Complex::expi(-beta);
    data[9] = Complex::new(0.0, -s) * Complex::expi(beta);
    Matrix::from_rows(2, data)
}

/// Qiskit's `xx_minus_yy(theta, beta)` on `[a, b]`: an XX-YY interaction between `|00>` and
/// `|11>`, with `beta` its phase.
pub fn xx_minus_yy(theta: f64, beta: f64) -> Matrix {
    let (c, s) = ((theta / 2.0).cos(), (theta / 2.0).sin());
    let mut data = vec![ZERO; 16];
    data[5] = ONE;
    data[10] = ONE;
    data[0] = Complex::new(c, 0.0);
    data[15] = Complex::new(c, 0.0);
    data[3] = Complex::new(0.0, -s) * Complex::expi(-beta);
    data[12] = Complex::new(0.0, -s) * Complex::expi(beta);
    Matrix::from_rows(2, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_gates_are_unitary() {
        for m in [
            u3(0.3, 1.1, -2.0),
            h(),
            sx(),
            rx(0.7),
            ry(0.7),
            rz(0.7),
            rxx(0.4),
            rzz(0.4),
            controlled(&x(), 2),
            controlled(&swap(), 1),
        ] {
            assert!(m.is_unitary(1e-12), "{m:?}");
        }
        assert!(sx().times(&sx()) == x() || (sx().times(&sx()).at(0, 1).re - 1.0).abs() < 1e-15);
    }

    #[test]
    fn cx_flips_the_target_when_the_control_is_set() {
        // qubits [control, target]: index bit 0 = control.
        let cx = controlled(&x(), 1);
        assert_eq!(cx.at(3, 1), ONE); // |c=1,t=0> -> |c=1,t=1>
        assert_eq!(cx.at(0, 0), ONE);
        assert_eq!(cx.at(2, 2), ONE);
    }

    #[test]
    fn expand_keeps_the_other_qubits() {
        // X on qubit 5 written on [2, 5]: flips bit 1 of the index.
        let e = x().expand(&[5], &[2, 5]);
        assert_eq!(e.at(2, 0), ONE);
        assert_eq!(e.at(3, 1), ONE);
        assert_eq!(e.at(0, 0), ZERO);
        // A product of expanded gates equals the two-qubit gate built directly.
        let both = x().expand(&[5], &[2, 5]).times(&h().expand(&[2], &[2, 5]));
        assert!(both.is_unitary(1e-12));
    }
}
