OPENQASM 2.0;
include "qelib1.inc";
qreg q[3];
creg meas[3];
h q[0];
cx q[0],q[1];
cx q[1],q[2];
barrier q[0],q[1],q[2];
measure q -> meas;
