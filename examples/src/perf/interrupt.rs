//! Ctrl-C (SIGINT) and SIGTERM during a run. The first one ends the run where it is:
//! the operations under way complete, the lines of what was measured are printed, the
//! connections close (so the peer reads "the peer ended the test early"), and iwperf
//! exits with status [`Interrupted::STATUS`] (a `--run_infinitely` run ends as designed,
//! with status 0). A second one exits at once.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use super::Error;

/// Set once the run was asked to end.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Wakes whoever waits in [`wait`].
static WAKE: Notify = Notify::const_new();

/// The run was asked to end: post no more operations, and wait for the peer no more
/// than the protocol needs to close.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Ends the run as Ctrl-C does (also: the peer of a `--run_infinitely -b` run ended).
pub(crate) fn interrupt() {
    INTERRUPTED.store(true, Ordering::Relaxed);
    WAKE.notify_waiters();
}

/// Resolves once the run is [`interrupted`].
pub(crate) async fn wait() {
    loop {
        let woken = WAKE.notified();
        if interrupted() {
            return;
        }
        woken.await;
    }
}

/// From now on Ctrl-C or SIGTERM ends the run (see the module). Before it, during the
/// connection setup, they end the process at once, as they end perftest.
pub(crate) fn watch(infinitely: bool) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        for n in 0.. {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            if n > 0 {
                crate::errln!("iwperf: interrupted again: exiting at once");
                std::process::exit(Interrupted::STATUS);
            }
            if infinitely {
                crate::errln!("iwperf: interrupted: ending the run after this interval");
            } else {
                crate::errln!(
                    "iwperf: interrupted: ending the test with what was measured so far \
                     (again to exit at once)"
                );
            }
            interrupt();
        }
    });
    Ok(())
}

/// The error of a run that Ctrl-C or SIGTERM ended (not a `--run_infinitely` one):
/// iwperf exits with [`Self::STATUS`].
#[derive(Debug)]
pub struct Interrupted {
    /// Result lines printed before it.
    pub lines: usize,
}

impl Interrupted {
    /// The exit status: 130 (128 + SIGINT), what a shell shows for a program Ctrl-C
    /// ended, perftest's included.
    pub const STATUS: i32 = 130;
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.lines {
            0 => f.write_str("interrupted before a result: nothing measured here"),
            1 => f.write_str("interrupted: the line above is what was measured before it"),
            _ => f.write_str("interrupted: the lines above are what was measured before it"),
        }
    }
}

impl std::error::Error for Interrupted {}
