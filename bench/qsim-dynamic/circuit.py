"""A dynamic circuit for timing: LAYERS layers of random u3 on every qubit and CX on alternating
neighbour pairs, then a mid-circuit round (three qubits measured into m, corrections conditioned
on m, a reset), two more layers, and every qubit measured.

Usage: python circuit.py QUBITS LAYERS SEED > FILE.qasm
"""
import random, sys
n = int(sys.argv[1]); layers = int(sys.argv[2]); seed = int(sys.argv[3])
rng = random.Random(seed)
out = ['OPENQASM 2.0;', 'include "qelib1.inc";', f'qreg q[{n}];', 'creg m[3];', f'creg c[{n}];']
def layer():
    for q in range(n):
        out.append(f'u3({rng.uniform(-3,3):.6f},{rng.uniform(-3,3):.6f},{rng.uniform(-3,3):.6f}) q[{q}];')
    off = rng.randrange(2)
    for q in range(off, n - 1, 2):
        out.append(f'cx q[{q}],q[{q+1}];')
for _ in range(layers):
    layer()
# a mid-circuit round: measure three qubits, correct conditionally, reset, continue
for i in range(3):
    out.append(f'measure q[{i}] -> m[{i}];')
out.append('if(m==1) x q[3];')
out.append('if(m==5) z q[4];')
out.append('if(m==7) h q[5];')
out.append('reset q[0];')
for _ in range(2):
    layer()
out.append('measure q -> c;')
print('\n'.join(out))
