//! Running a program under a memory policy.
//!
//! A memory policy belongs to a thread, is copied to children and survives `exec`. So:
//!
//! - [`exec_under`] sets the policy on the calling thread and replaces the process with the program
//!   (`numactl`'s way): the program's exit status and signals are simply its own.
//! - [`spawn_under`] sets the policy, starts the program as a child (which inherits it), puts the
//!   caller's own policy back and returns a [`Supervised`] child. [`Supervised::wait`] forwards
//!   SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to us (the terminal's Ctrl-C reaches the child by
//!   itself) until the child exits. This is for callers that must clean up afterwards, such as
//!   restoring the global weighted-interleave table. The caller should be single-threaded.
//! - [`spawn_with_policy`] starts the child under the policy and leaves signals alone, for a
//!   caller that watches the child in its own loop (`tierd --tune -- CMD`).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use cxltier_sys::signal::{self, BlockedSignals, SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use cxltier_sys::{get_mempolicy, set_mempolicy, Policy};

use crate::policy::ResolvedPolicy;
use crate::weights::{Applied, Restored, TemporaryWeights};
use crate::ControlError;

/// Signals forwarded to a supervised child.
pub const FORWARDED: [i32; 4] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT];

fn spawn_error(cmd: &Command, source: std::io::Error) -> ControlError {
    ControlError::Spawn {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    }
}

/// What happens to the weighted-interleave table around [`run_with_weights`], for the caller to
/// report (the table is system-wide: changing it is said).
pub trait WeightsRunSink {
    /// The requested weights were written.
    fn weights_set(&mut self, applied: &Applied);
    /// The weights were put back (`None`: there was nothing to put back).
    fn weights_restored(&mut self, restored: Option<Restored>);
}

/// Writes the weights `resolved` asks for, runs `cmd` as a child under its policy (forwarding
/// the signals cxltier receives), waits for it, and puts the previous weights back, also when
/// the child could not be started (the error is then [`ControlError::Spawn`]).
pub fn run_with_weights(
    weights: &mut TemporaryWeights,
    resolved: &ResolvedPolicy,
    cmd: &mut Command,
    sink: &mut impl WeightsRunSink,
) -> Result<ExitStatus, ControlError> {
    let policy = resolved.policy()?;
    let applied = weights.set(&resolved.weights)?;
    sink.weights_set(&applied);
    let mut child = match spawn_under(&policy, cmd) {
        Ok(c) => c,
        Err(e) => {
            sink.weights_restored(weights.restore());
            return Err(e);
        }
    };
    let status = child.wait();
    let restored = weights.restore();
    drop(child);
    sink.weights_restored(restored);
    status
}

/// Fails unless the running kernel has the weighted-interleave policy (Linux 6.9+).
pub fn require_weighted_interleave() -> Result<(), ControlError> {
    if cxltier_sys::kernel_supports(cxltier_sys::Mode::WeightedInterleave)? {
        Ok(())
    } else {
        Err(ControlError::NoWeightedInterleavePolicy)
    }
}

/// Set `policy` on the calling thread and `exec` `cmd`. Returns only if something failed; the
/// thread's previous policy is then back in place.
pub fn exec_under(policy: &Policy, cmd: &mut Command) -> ControlError {
    let previous = match get_mempolicy() {
        Ok(p) => p,
        Err(e) => return e.into(),
    };
    if let Err(e) = set_mempolicy(policy) {
        return e.into();
    }
    let err = cmd.exec();
    let _ = set_mempolicy(&previous);
    spawn_error(cmd, err)
}

/// Start `cmd` as a child under `policy` (the child inherits it), putting the caller's own policy
/// back; unlike [`spawn_under`], signals are left alone: for a caller with its own signal
/// handling that watches the child rather than waiting for it.
pub fn spawn_with_policy(policy: &Policy, cmd: &mut Command) -> Result<Child, ControlError> {
    let previous = get_mempolicy()?;
    set_mempolicy(policy)?;
    let spawned = cmd.spawn();
    // Our own policy goes back whatever happened; the child has its copy.
    let restored = set_mempolicy(&previous);
    let child = spawned.map_err(|e| spawn_error(cmd, e))?;
    restored?;
    Ok(child)
}

/// A child started by [`spawn_under`], with the forwarded signals blocked in the caller until it is
/// dropped.
pub struct Supervised {
    child: Child,
    signals: BlockedSignals,
}

/// Start `cmd` as a child under `policy`, leaving the caller's own policy as it was.
pub fn spawn_under(policy: &Policy, cmd: &mut Command) -> Result<Supervised, ControlError> {
    let mut blocked = FORWARDED.to_vec();
    blocked.push(SIGCHLD);
    // Block first, so that a signal arriving between spawn and wait is not lost (nor kills us
    // before the caller can clean up). The child starts with an empty mask.
    let signals = BlockedSignals::block(&blocked)?;
    signal::unblock_in_child(cmd)?;
    let previous = get_mempolicy()?;
    set_mempolicy(policy)?;
    let spawned = cmd.spawn();
    // Our own policy goes back whatever happened; the child has its copy.
    let restored = set_mempolicy(&previous);
    let child = spawned.map_err(|e| spawn_error(cmd, e))?;
    let supervised = Supervised { child, signals };
    restored?;
    Ok(supervised)
}

impl Supervised {
    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Wait for the child to exit, forwarding [`FORWARDED`] signals sent to us with `kill` (signals
    /// from the terminal reach the child directly, as it shares our process group, and are not sent
    /// twice).
    pub fn wait(&mut self) -> Result<ExitStatus, ControlError> {
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) => {}
                Err(e) => {
                    return Err(ControlError::Spawn {
                        program: format!("child {}", self.child.id()),
                        source: e,
                    })
                }
            }
            match self.signals.wait(Duration::from_millis(250))? {
                Some(r) if r.signal != SIGCHLD && !r.from_kernel => {
                    // The child may have exited meanwhile; then there is nothing to forward to.
                    let _ = signal::kill(self.child.id(), r.signal);
                }
                _ => {}
            }
        }
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // Signals that arrived after the child exited were for it; taking them here keeps them
        // from killing us when the mask is restored.
        self.signals.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cxltier_sys::{mems_allowed, Mode};
    use std::os::unix::process::ExitStatusExt;

    /// Runs `f` in a thread of its own: policy and signal mask are per thread, so the test
    /// harness's are unaffected.
    fn in_own_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    /// A bind to every node this process may use.
    fn bind_all() -> Policy {
        Policy::new(Mode::Bind, mems_allowed().unwrap())
    }

    /// `sh -c "exit CODE"`.
    fn sh_exit(code: i32) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &format!("exit {code}")]);
        cmd
    }

    #[test]
    fn exit_status_comes_back_and_own_policy_is_kept() {
        in_own_thread(|| {
            let mut child = spawn_under(&bind_all(), &mut sh_exit(7)).unwrap();
            assert_eq!(child.wait().unwrap().code(), Some(7));
            drop(child);
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        });
    }

    #[test]
    fn a_child_spawned_with_a_policy_runs_under_it_and_ours_is_kept() {
        in_own_thread(|| {
            let policy = bind_all();
            let mut child = spawn_with_policy(&policy, &mut sh_exit(3)).unwrap();
            assert_eq!(child.wait().unwrap().code(), Some(3));
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
            let err = spawn_with_policy(&policy, &mut Command::new("/nonexistent/cxltier-x"))
                .unwrap_err();
            assert!(
                matches!(&err, ControlError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
                "{err}"
            );
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        });
    }

    #[test]
    fn death_by_signal_is_reported() {
        in_own_thread(|| {
            let mut cmd = Command::new("sleep");
            cmd.arg("30");
            let mut child = spawn_under(&Policy::default_policy(), &mut cmd).unwrap();
            signal::kill(child.id(), SIGTERM).unwrap();
            assert_eq!(child.wait().unwrap().signal(), Some(SIGTERM));
        });
    }

    #[test]
    fn missing_program_is_named() {
        in_own_thread(|| {
            let mut cmd = Command::new("/nonexistent/cxltier-test-program");
            let e = spawn_under(&Policy::default_policy(), &mut cmd)
                .err()
                .unwrap();
            assert!(e.to_string().contains("cxltier-test-program"), "{e}");
            assert_eq!(get_mempolicy().unwrap().mode, Mode::Default);
        });
    }
}
