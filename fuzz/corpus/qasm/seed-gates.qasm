OPENQASM 2.0;
include "qelib1.inc";
gate mix(a) x, y { rzz(a) x, y; ry(a/2) y; cx y, x; }
qreg q[3];
creg c[3];
u3(0.3,-1.2,2.5e-1) q[0];
mix(0.7) q[0],q[1];
crx(-pi/3) q[1],q[2];
cu3(1,2,3) q[2],q[0];
rxx(0.25) q[0],q[2];
ccx q[0],q[1],q[2];
sdg q[1];
tdg q[2];
sx q[0];
u(0.1,0.2,0.3) q[1];
id q[2];
