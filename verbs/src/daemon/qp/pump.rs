//! The pump: moves completions out of a queue pair's ring into the application's
//! completion queues, sleeping on the daemon's doorbell only after it parked and found the
//! ring empty.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ipc::qpseg::Side;
use rdmap::QpEnd;
use tokio::sync::watch;

use super::super::Client;
use super::Shared;

/// How often the pump looks at the ring while the application busy-polls it.
const POLLED_PUMP: std::time::Duration = std::time::Duration::from_millis(1);

pub(super) async fn pump(
    shared: Arc<Shared>,
    bell: ipc::qpseg::AsyncDoorbell,
    client: Arc<Client>,
    mut end: watch::Receiver<Option<QpEnd>>,
) {
    let mut polls = shared.polls.load(Ordering::Relaxed);
    let mut watching = true;
    let mut awaited = false;
    loop {
        if end.borrow().is_some() && client.is_gone() {
            shared.flush_all();
            return;
        }
        if shared.drain() {
            continue;
        }
        // While the application busy-polls (`poll_input`), the ring is its: the pump
        // stays unparked, so the daemon does not ring for each completion, and looks
        // again now and then in case the polling stopped. Once it awaits instead (a
        // request's future, or a completion queue: it polled, then posted and awaited,
        // as iwperf write_lat does), the pump parks so that the daemon rings for the
        // completion: before, that completion waited for the pump's next look, 1 ms.
        let now = shared.polls.load(Ordering::Relaxed);
        if now != polls && !awaited {
            polls = now;
            tokio::select! {
                _ = tokio::time::sleep(POLLED_PUMP) => {}
                _ = shared.awaited.notified() => awaited = true,
            }
            continue;
        }
        polls = now;
        awaited = false;
        shared.seg.park(Side::Client);
        if shared.drain() {
            shared.seg.unpark(Side::Client);
            continue;
        }
        tokio::select! {
            rung = bell.wait() => if rung.is_err() {
                return;
            },
            changed = end.changed(), if watching => watching = changed.is_ok(),
        }
        shared.seg.unpark(Side::Client);
    }
}
