//! One module per subcommand. Each defines `Args` (its clap arguments) and `run(Args)`.

pub mod apply;
pub mod plan;
pub mod probe;
pub mod qsim;
pub mod ras;
pub mod run;
pub mod serve;
pub mod show;
pub mod store;
pub mod tierd;
pub mod topo;
pub mod touch;
pub mod ycsb;
