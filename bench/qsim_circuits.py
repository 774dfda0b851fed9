"""OpenQASM 2.0 circuits the qsim benchmarks share (lists of lines)."""
import math
import random


def header(n):
    return ['OPENQASM 2.0;', 'include "qelib1.inc";', f"qreg q[{n}];"]


def qft(n):
    """The quantum Fourier transform without the final swaps."""
    lines = header(n)
    for j in reversed(range(n)):
        lines.append(f"h q[{j}];")
        for k in reversed(range(j)):
            lines.append(f"cp({math.pi / 2 ** (j - k)}) q[{k}],q[{j}];")
    return lines


def ising(n, steps):
    """First-order Trotter steps of a transverse-field Ising chain (rzz as cx-rz-cx)."""
    lines = header(n) + [f"h q[{i}];" for i in range(n)]
    for s in range(steps):
        for i in range(n - 1):
            lines += [f"cx q[{i}],q[{i + 1}];", f"rz({0.1 + 0.01 * s}) q[{i + 1}];", f"cx q[{i}],q[{i + 1}];"]
        lines += [f"rx({0.2 + 0.003 * i}) q[{i}];" for i in range(n)]
    return lines


def layered(n, layers, seed, toffoli=False):
    """Random layers: u3 on every qubit, cx on random pairs, and a Toffoli per layer if asked."""
    rng = random.Random(seed)
    lines = header(n)
    for _ in range(layers):
        lines += [f"u3({rng.uniform(0, 3):.5f},{rng.uniform(0, 3):.5f},{rng.uniform(0, 3):.5f}) q[{i}];" for i in range(n)]
        perm = list(range(n))
        rng.shuffle(perm)
        lines += [f"cx q[{perm[i]}],q[{perm[i + 1]}];" for i in range(0, n - 1, 2)]
        if toffoli:
            a, b, c = rng.sample(range(n), 3)
            lines.append(f"ccx q[{a}],q[{b}],q[{c}];")
    return lines
