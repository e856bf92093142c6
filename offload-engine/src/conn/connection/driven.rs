//! What the connection's driver asks of the state between its reads and writes: whether
//! to park for a migration, what to wait for after a turn, the accounting of a write it
//! made outside the lock, its timers, and the end of the connection. The driver owns the
//! socket's readiness and its own clocks; everything here runs under the lock.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use rdmap::{QpEnd, QpState, Transmit};
use tokio::time::Instant;

use super::{Connection, ParkRequest};
use crate::pcap::Tap;
use crate::timeouts::Expiry;
use crate::tpt::Tpt;

/// How long after the application's last [`Qp::poll_input`](crate::conn::Qp::poll_input)
/// the driver leaves reading to it. If it stops polling, the driver reads again after this.
const POLL_MUTE: std::time::Duration = std::time::Duration::from_millis(1);

/// What the driver waits for after a turn.
#[derive(Debug)]
pub(crate) struct Waits {
    /// The stream's next timer.
    pub(crate) deadline: Option<std::time::Instant>,
    /// The peer's FIN was read: no more readiness to wait for.
    pub(crate) eof: bool,
    /// A thread writes an inline transmit outside the lock: the connection does not end
    /// before it hands it back (and wakes the driver).
    pub(crate) claimed: bool,
    /// The application polls its input itself until then: leave reading to it.
    pub(crate) muted_until: Option<Instant>,
    /// When the connection times out if nothing moves, and why.
    pub(crate) liveness: Option<(Instant, Expiry)>,
}

impl Connection {
    /// Whether the driver capturing this connection copies what it writes.
    pub(crate) fn capturing(&self) -> bool {
        self.io.capturing()
    }

    /// How long after a response the driver polls the socket instead of sleeping.
    pub(crate) fn busy_poll(&self) -> std::time::Duration {
        self.home.busy_poll
    }

    /// The park a migration asked for, if the driver can stop now: nothing is half done
    /// at a turn's start (reads and writes are whole calls), and what the driver holds
    /// unwritten (`out`) goes back to the state for the next driver. The driver then
    /// hands its socket over. A connection no longer running drops the request (the
    /// migration reads why from the state).
    pub(crate) fn take_park(&mut self, out: &mut Transmit, shut_down: bool) -> Option<ParkRequest> {
        if self.park.is_some() && (shut_down || self.stream.state() != QpState::Rts) {
            self.park = None;
        }
        // Not while a busy poll reads outside the lock (the input is out with it), nor in
        // the middle of a payload read straight into memory: that holds
        // the mapping, which does not cross to another process. And the application is
        // not in the middle of an FPDU on a shared socket: the socket goes to another
        // engine, so the application stops writing to it. Nor while a thread writes an
        // inline transmit outside the lock (it hands back what is left). (An inline
        // transmit produces only when the driver holds nothing, so `unwritten` is empty
        // whenever `out` is not.)
        let can_park = (out.is_empty() || self.unwritten.is_empty())
            && !self.rx_busy
            && !self.tx_claimed
            && !self.stream.placing_directly()
            && (self.park.is_none() || self.revoke_tx());
        let park = self.park.take_if(|_| can_park);
        // Ending the share may have terminated the stream (the application left it in
        // the middle of an FPDU): its events are delivered either way.
        self.collect();
        let park = park?;
        // This side's end no longer shuts the socket down.
        self.io.handed_over();
        if !out.is_empty() {
            std::mem::swap(out, &mut self.unwritten);
        }
        self.tx_busy = !self.unwritten.is_empty();
        Some(park)
    }

    /// The driver handed a park back (the migration was given up): it runs again.
    pub(crate) fn end_migration(&mut self) {
        self.migrating = false;
    }

    /// True once this side is done: in Error or Idle, or closing with nothing left. Not
    /// while a thread writes an inline transmit (the FIN must follow its octets).
    pub(crate) fn is_done(&self) -> bool {
        if self.tx_claimed {
            return false;
        }
        match self.stream.state() {
            QpState::Error | QpState::Idle => true,
            QpState::Closing => self.stream.is_drained(),
            _ => false,
        }
    }

    /// Shuts TCP's sending half.
    pub(crate) fn shutdown_write(&mut self) {
        self.io.shutdown_write();
    }

    /// Octets moved either way so far (the driver's liveness check compares them).
    pub(crate) fn moved(&self) -> u64 {
        self.io.moved()
    }

    /// Nothing moved since the driver saw `moved` octets: no octet read or written, and
    /// no inline transmit being written outside the lock (its octets count when it hands
    /// them back).
    pub(crate) fn stalled_since(&self, moved: u64) -> bool {
        self.io.moved() == moved && !self.tx_claimed
    }

    /// What the driver waits for after a turn at `now`: `progress_at` is when octets last
    /// moved, `holding` whether the driver holds octets to write.
    pub(crate) fn waits(&self, now: Instant, progress_at: Instant, holding: bool) -> Waits {
        // While the application polls the input itself, the driver does not wait for
        // readability: every message would wake it only to find the input taken.
        let muted_until = self
            .polled_at
            .map(|t| Instant::from_std(t + POLL_MUTE))
            .filter(|&u| u > now);
        let liveness = (self.stream.state() == QpState::Rts)
            .then(|| {
                // Requests waiting for a queued registration are not a stall.
                let busy = !self.rx.is_empty()
                    || holding
                    || (self.stream.has_outstanding()
                        && !self.stream.waits_on_registration(&*self.mem));
                self.home.timeouts.deadline(progress_at, busy)
            })
            .flatten();
        Waits {
            deadline: [self.stream.poll_timeout(), self.tx_retry]
                .into_iter()
                .flatten()
                .min(),
            eof: self.rx_eof,
            claimed: self.tx_claimed,
            muted_until,
            liveness,
        }
    }

    /// Accounts for `n` octets the driver wrote outside the lock (`copy`: what the
    /// capture records), `out` what it still holds.
    pub(crate) fn wrote(&mut self, n: usize, copy: &[u8], out: &Transmit) {
        self.io.wrote(&mut self.stream, n, copy);
        self.tx_busy = !out.is_empty();
        self.settle_tx(out.is_empty());
        if n > 0 {
            self.collect();
        }
    }

    /// The stream's timers at `now`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        self.stream.handle_timeout(now.into_std());
        self.collect();
    }

    /// The connection timed out with nothing moving.
    pub(crate) fn timed_out(&mut self) {
        self.end.get_or_insert(QpEnd::TimedOut);
    }

    /// Counts input a busy poll found (a runtime wake-up saved).
    pub(crate) fn count_busy_polled(&self) {
        self.home.totals.busy_polled();
    }

    /// The driver ended (`failed` if by an IO error): a migration waiting for it learns
    /// that it ended, the stream ends flushed, and the socket's capture is closed. Returns
    /// how it ended (to publish once the capture has ended), the capture, and the memory
    /// table (type 2 windows bound to this queue pair die with it).
    pub(crate) fn finish(&mut self, failed: Option<&io::Error>) -> (QpEnd, Tap, Arc<Tpt>) {
        self.park = None;
        if let Some(e) = failed {
            tracing::debug!(error = %e, "connection failed");
            self.end.get_or_insert(QpEnd::ConnectionLost);
        }
        if !matches!(self.stream.state(), QpState::Error | QpState::Idle) {
            self.stream.handle_eof(&mut BytesMut::new());
        }
        self.collect();
        // Published by the caller, once the capture has ended.
        self.publish_end = None;
        let end = self.end.unwrap_or(QpEnd::ConnectionLost);
        (end, self.io.close(), Arc::clone(&self.home.tpt))
    }
}
