//! Runnable example programs built on [`verbs`], and the small helpers they share.
//!
//! Binaries:
//!
//! * `demo`: two embedded engines in one process over loopback: connect with private
//!   data, register, RDMA Write, RDMA Read back and verify, Send/Recv ping-pong, with the
//!   measured throughput. `cargo run --release -p examples --bin demo -- --help`.
//!
//! * `iwarp-rping`: rdma-core's `rping` on this stack, interoperating with `rping` on
//!   Linux siw in both roles (see [`rping`]). `iwarp-rping --help`.
//!
//! * `iwperf`: perftest's `ib_{write,read,send}_{bw,lat} -R`, interoperating with perftest
//!   on Linux siw (see [`perf`]). `iwperf --help`.
//!
//! * `iwbench`: the stack against raw TCP on the same loopback, in the same run, with the
//!   ratios. `iwbench --smoke` runs it for a moment.
//!
//! * `quickstart`: the README's quick start, a client of an iwarpd's built-in service
//!   (connect, register, RDMA Write, Read back, Send and its echo).
//!
//! * `kv`: a small key-value store (RDMA Write plus a Send notification).
//!
//! * `split`: seed 002's split-model driver with its push-push messaging (see [`split`]).
#![forbid(unsafe_code)]

pub mod args;
pub mod listen;
pub mod perf;
pub mod rping;
pub mod split;
pub mod stdio;
pub mod words;

use std::time::Duration;

pub use verbs;

/// The error type of the example programs.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs a program's work `fut` on a runtime worker and exits with status 1, printing
/// `program: error`, if it fails (with status 130 if Ctrl-C ended it:
/// [`perf::Interrupted`]). On a worker it sits next to the connections' driver
/// tasks; awaited from `main` itself (not a worker) every completion would cost a
/// cross-thread wake-up (measured: 4x the ping-pong round trip).
pub async fn run_on_worker(
    program: &str,
    fut: impl Future<Output = Result<(), Error>> + Send + 'static,
) {
    let result = tokio::spawn(fut)
        .await
        .unwrap_or_else(|e| Err(format!("the task failed: {e}").into()));
    if let Err(e) = result {
        crate::errln!("{program}: {e}");
        let status = match e.downcast_ref::<perf::Interrupted>() {
            Some(_) => perf::Interrupted::STATUS,
            None => 1,
        };
        std::process::exit(status);
    }
}

/// How long a tool waits for `Device::connect` whose TCP connect and MPA exchange the
/// device bounds by `timeout` each: both, and a margin. Only a net for a local `iwarpd`
/// that never answers: the device's own limits end a connect first, with the error that
/// says which step failed.
pub fn connect_limit(timeout: Duration) -> Duration {
    timeout
        .saturating_mul(2)
        .saturating_add(Duration::from_secs(5))
}

/// `e`, what failed in a run, explained by how `what` (a connection) ended, `end`: when a
/// connection ends under a run, the request that shows it first (flushed, or a receive
/// that cannot come) names nothing, and the end is the cause. A close or a lost
/// connection is the peer exiting or ending the run early.
pub fn end_explains(end: verbs::QpEnd, what: &str, e: &Error) -> String {
    match end {
        verbs::QpEnd::Closed => {
            format!("the peer ended the test early or exited: it closed {what}")
        }
        verbs::QpEnd::ConnectionLost => {
            format!("the peer exited, or the network to it failed: {what} ended without a close")
        }
        end => format!("{what} ended: {end} (then: {e})"),
    }
}

/// `e`, a failed run on `qp`, explained by how `qp` ended if it ended within a second
/// with a cause of its own (a Terminate, a timeout, its device going away): that is what
/// broke the run. A close or a lost connection leaves `e` as it is, for the tool to name
/// in its own terms (which step the peer left at).
pub async fn explain_end(qp: &verbs::Qp, e: Error) -> Error {
    match tokio::time::timeout(Duration::from_secs(1), qp.closed()).await {
        Ok(verbs::QpEnd::Closed | verbs::QpEnd::ConnectionLost) | Err(_) => e,
        Ok(end) => end_explains(end, "the connection", &e).into(),
    }
}

/// Awaits `fut` for at most `timeout`; past it the run fails naming `what` it waited for.
pub async fn step<T>(
    timeout: Duration,
    what: &str,
    fut: impl Future<Output = T>,
) -> Result<T, Error> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("timed out after {timeout:?} waiting for {what}").into())
}
