//! How a driver that always finds work shares its runtime thread.
//!
//! A driver whose socket always takes what it writes, or whose busy poll always finds
//! the next request, may never return to the runtime on its own. On a worker that no
//! other worker can stand in for, it would starve the worker's other tasks, and with
//! every worker so, the poller and the timers too.
//!
//! tokio's answer is its coop budget, spent per operation. But a yield on a
//! multi-threaded runtime wakes an idle worker to steal the task, and from then on the
//! two workers hand the connection back and forth. With a unit spent on every turn, a
//! responder streaming Read 64 KiB Responses switched threads about 29,000 times a second
//! (two workers, half of them involuntary) and ran 20-30% slower; with this policy, about
//! 150 (`SIZE=65536 scripts/ctx_switches.sh target/release/iwperf read_bw --crc`, server
//! lines). Yields at a fixed interval, even 10 ms apart, kept the workers passing the
//! connection around (a throwaway build). So the driver yields only when it has run
//! [`RUN_AT_MOST`] without returning to the runtime *and* no worker is idle: an idle
//! worker polls the sockets and timers and steals queued tasks, so nothing waits for this
//! one then.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a driver runs without returning to the runtime before it yields: how long
/// the worker's other tasks wait for it at most.
pub(crate) const RUN_AT_MOST: Duration = Duration::from_millis(1);

/// When the driver last returned to the runtime, as far as it knows.
#[derive(Debug, Default)]
pub(crate) struct Fairness {
    /// Since when the driver has run without returning to the runtime; `None` just after
    /// it did (the next turn starts the count).
    since: Option<Instant>,
}

impl Fairness {
    /// A turn starts at `now`: true if the driver ran long enough without returning to
    /// the runtime that it must yield now.
    pub(crate) fn must_yield(&mut self, now: Instant) -> bool {
        let since = *self.since.get_or_insert(now);
        if now.duration_since(since) < RUN_AT_MOST {
            return false;
        }
        if a_worker_is_idle() {
            // Someone stands in: ask again after as long.
            self.since = Some(now);
            return false;
        }
        true
    }

    /// The driver returned to the runtime (it waited, or it yielded).
    pub(crate) fn returned(&mut self) {
        self.since = None;
    }
}

/// Whether a worker of the current runtime is parked (idle), and so polls the sockets and
/// timers and steals queued tasks. The worker that asks is running, so that is another
/// one; a current-thread runtime has none.
fn a_worker_is_idle() -> bool {
    let metrics = tokio::runtime::Handle::current().metrics();
    // An odd count: the worker is parked.
    (0..metrics.num_workers()).any(|w| metrics.worker_park_unpark_count(w) % 2 == 1)
}

/// Runs `fut` and tells whether it returned to the runtime (was pending) on the way.
pub(crate) async fn watched<F: Future>(fut: F) -> (F::Output, bool) {
    let mut fut = std::pin::pin!(fut);
    let mut pended = false;
    let out = std::future::poll_fn(|cx| {
        let poll = fut.as_mut().poll(cx);
        pended |= poll.is_pending();
        poll
    })
    .await;
    (out, pended)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yields_only_after_running_long_without_returning() {
        // A current-thread runtime: no other worker can stand in.
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _in = rt.enter();
        let t0 = Instant::now();
        let mut fair = Fairness::default();
        assert!(!fair.must_yield(t0));
        assert!(!fair.must_yield(t0 + RUN_AT_MOST / 2));
        assert!(fair.must_yield(t0 + RUN_AT_MOST));
        // Having returned, the count starts again at the next turn.
        fair.returned();
        assert!(!fair.must_yield(t0 + RUN_AT_MOST * 3));
        assert!(!fair.must_yield(t0 + RUN_AT_MOST * 3 + RUN_AT_MOST / 2));
        assert!(fair.must_yield(t0 + RUN_AT_MOST * 4));
    }

    #[test]
    fn an_idle_worker_stands_in() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::spawn(async {
                // Wait until the other worker parks (it has nothing to do).
                while !a_worker_is_idle() {
                    std::thread::yield_now();
                }
                let t0 = Instant::now();
                let mut fair = Fairness::default();
                assert!(!fair.must_yield(t0));
                assert!(!fair.must_yield(t0 + RUN_AT_MOST * 2));
                // Asked again only after as long.
                assert!(!fair.must_yield(t0 + RUN_AT_MOST * 2 + RUN_AT_MOST / 2));
            })
            .await
            .unwrap();
        });
    }

    #[test]
    fn watched_tells_a_pending_future_from_a_ready_one() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(watched(async { 7 })), (7, false));
        let pends = async {
            tokio::task::yield_now().await;
            8
        };
        assert_eq!(rt.block_on(watched(pends)), (8, true));
    }
}
