// Qiskit qasm2.dumps of a small ansatz
OPENQASM 2.0;
include "qelib1.inc";
gate rzx(param0) q0,q1 { h q1; cx q0,q1; rz(param0) q1; cx q0,q1; h q1; }
qreg q[2];
ry(0.4) q[0];
ry(-0.4) q[1];
rzx(pi/7) q[0],q[1];
cz q[0],q[1];
cy q[1],q[0];
ch q[0],q[1];
crz(0.2) q[0],q[1];
cswap q[0],q[1],q[0];
