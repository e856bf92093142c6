//! What the application's handle ([`Qp`](crate::conn::Qp)) asks of the state: posts,
//! busy polls, closing, and what it reads of the connection. Every call that feeds the
//! stream collects its events before it returns, so the caller has only to release the
//! lock ([`Shared::unlock`](crate::conn::Shared::unlock)), which delivers them.

use std::net::TcpStream;
use std::sync::Arc;

use rdmap::{Completion, PostError, QpEnd, QpState, RecvWr, SendWr, Stream};

use super::{Connection, Next, inline_tx, push_post};
use crate::conn::io::{Input, Read};
use crate::push::QpPush;

impl Connection {
    /// The protocol stream, to read its settings and state.
    pub(crate) fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The current state.
    pub(crate) fn state(&self) -> QpState {
        self.stream.state()
    }

    /// The addresses of its socket, this end's and the peer's (`None` once it closed).
    pub(crate) fn addrs(&self) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.io.addrs()
    }

    /// Its part of the push path, if it has one.
    pub(crate) fn push(&self) -> Option<&Arc<QpPush>> {
        self.home.push.as_ref()
    }

    /// Takes its part of the push path out (it moves to another engine, which adopts it).
    pub(crate) fn take_push(&mut self) -> Option<Arc<QpPush>> {
        self.home.push.take()
    }

    /// Octets wait for room in the socket or the stream has FPDUs to produce.
    pub(crate) fn tx_backlog(&self) -> bool {
        self.tx_busy || self.tx_claimed || self.stream.wants_transmit()
    }

    /// Serves or refuses incoming RDMA Writes, Reads and Atomics.
    pub(crate) fn set_incoming_rdma(&mut self, allowed: bool) {
        self.stream.set_incoming_rdma(allowed);
    }

    /// What a request failing its local checks does: drain the send queue or end.
    pub(crate) fn set_drain_on_local_failure(&mut self, drain: bool) {
        self.stream.set_drain_on_local_failure(drain);
    }

    /// Leaves the drained send queue state after a local failure.
    pub(crate) fn resume_send_queue(&mut self) {
        self.stream.resume_send_queue();
        self.collect();
    }

    /// Posts one send request: by seed 000's push path when it runs for this queue pair,
    /// else through the send queue (written by this thread when small and the queue is
    /// idle). Returns what is left to do once the lock is released.
    pub(crate) fn post_send(&mut self, wr: SendWr) -> Result<Next, PostError> {
        // Out of the state while it runs, as it runs on the state.
        let push = self.home.push.take();
        let posted = match &push {
            Some(p) => push_post::post(self, p, wr),
            None => inline_tx::post_queued(self, wr),
        };
        self.home.push = push;
        self.collect();
        posted
    }

    /// Queues `wrs` on the send queue, for the driver to send together; `check` refuses
    /// an id first. Returns how many were queued, and the error that stopped the rest.
    pub(crate) fn post_send_batch(
        &mut self,
        wrs: impl IntoIterator<Item = SendWr>,
        check: impl Fn(&SendWr) -> Result<(), PostError>,
    ) -> (usize, Result<(), PostError>) {
        let mut queued = 0;
        let post = || {
            for wr in wrs {
                check(&wr)?;
                self.stream.post_send(wr)?;
                queued += 1;
            }
            Ok(())
        };
        // A batch that failed part-way queued its first requests: they still go out.
        let posted = post();
        if let Some(p) = &self.home.push {
            p.queued(queued as u64);
        }
        self.collect();
        (queued, posted)
    }

    /// Queues a receive buffer.
    pub(crate) fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        let posted = self.stream.post_recv(wr);
        self.collect();
        posted
    }

    /// Starts one busy poll of the input on the caller's thread: the input claimed, with
    /// the socket, for a read outside the lock ([`read_unlocked`]); `None` if there is
    /// nothing to poll now (the input is the driver's, or ended, or moving).
    ///
    /// [`read_unlocked`]: crate::conn::io::read_unlocked
    pub(crate) fn claim_polled(&mut self) -> Option<(Input, Arc<TcpStream>)> {
        if self.rx_eof
            || self.rx_busy
            || self.migrating
            || !matches!(self.stream.state(), QpState::Rts | QpState::Closing)
        {
            return None;
        }
        let sock = self.io.socket()?;
        self.polled_at = Some(crate::conn::now());
        Some((self.claim_input()?, sock))
    }

    /// Ends a busy poll that [`claim_polled`](Self::claim_polled) started, with what the
    /// read outside the lock found; `all`: every request's output is written here, not
    /// only a lone one's. Returns whether anything arrived, and what is left to do once
    /// the lock is released.
    pub(crate) fn polled(
        &mut self,
        input: Input,
        read: std::io::Result<usize>,
        all: bool,
    ) -> (bool, Next) {
        let read = self.return_input(input, read);
        let got = matches!(read, Ok(Read::Data(_)));
        if got {
            self.process_input();
        }
        // An error, the FIN or a state change: the driver's work. So is output, except
        // that of a lone request (a Send or Write too large to go out with its post),
        // produced and written by this thread while the driver holds nothing unwritten, as a
        // post's push writes: the driver, woken from this thread, may not run before the
        // application's loop gives the runtime a turn, and a lone request is what the
        // application waits for. Many requests in flight stay with the driver, off the
        // application's thread, unless the caller asks for `all`: an experiment that
        // wrote every request here from iwperf's tasks lost send_bw 64 KiB 17.6 -> 15.9
        // and read_bw 29.4 -> 23.5 Gbit/s (BENCHMARKS.md).
        let here = all || self.stream.outstanding_sends() == 1;
        // A migration that asked meanwhile waited for this read to end: the driver parks.
        let next = if read.is_err()
            || self.park.is_some()
            || self.rx_eof
            || self.stream.state() != QpState::Rts
        {
            Next::Driver
        } else if here && self.stream.wants_transmit() {
            inline_tx::transmit(self, inline_tx::TX_HIGH_WATER)
        } else if self.stream.wants_transmit() {
            Next::Driver
        } else {
            Next::Done
        };
        self.collect();
        (got, next)
    }

    /// The application stops polling its input: true if it was (the driver must read
    /// again).
    pub(crate) fn stop_polling(&mut self) -> bool {
        self.polled_at.take().is_some()
    }

    /// Starts a graceful close.
    pub(crate) fn close(&mut self) {
        self.stream.close(crate::conn::now());
        self.collect();
    }

    /// Ends the connection at once with a Terminate carrying `code`.
    pub(crate) fn terminate(&mut self, code: rdmap::TermCode) {
        self.stream.terminate(code);
        self.collect();
    }

    /// How many completions wait for delivery.
    pub(crate) fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// True if completions or the end wait for delivery.
    pub(crate) fn has_deliveries(&self) -> bool {
        !self.ready.is_empty() || self.publish_end.is_some()
    }

    /// Swaps the completions waiting for delivery into `batch` (which must be empty), and
    /// takes the end to publish, if any.
    pub(crate) fn take_deliveries(&mut self, batch: &mut Vec<Completion>) -> Option<QpEnd> {
        std::mem::swap(batch, &mut self.ready);
        self.publish_end.take()
    }

    /// Its counters go to the engine it belongs to last (the queue pair is gone).
    pub(crate) fn retire_stats(&self) {
        self.home.totals.retire(&self.stream.stats());
    }
}
