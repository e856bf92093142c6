//! [`Qp`], the application's handle of a connected queue pair, and [`Shared`], what it
//! and the connection's driver share.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rdmap::{Completion, PostError, QpEnd, QpNum, QpState, RecvWr, SendWr};
use tokio::sync::{Notify, watch};

use super::completions::Completions;
use super::connection::{Connection, Next};
use cq::{CompletionFuture, Waiters, check_wr_id};

thread_local! {
    /// The completions one delivery hands out: a vector kept per thread and swapped with
    /// the connection's under the lock, so a steady stream of deliveries allocates nothing.
    static SPARE: Cell<Vec<Completion>> = const { Cell::new(Vec::new()) };
}

/// What the application handle and the driver share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) num: QpNum,
    /// Its protection domain (live migration moves the domain with its queue pairs).
    pub(crate) pd: crate::tpt::PdId,
    state: Mutex<Connection>,
    /// Wakes the driver: new work was posted ([`wake_driver`](Self::wake_driver)).
    pub(crate) wake: Notify,
    /// How many times the driver was woken: a busy poll stops when it changes.
    wakes: AtomicU64,
    /// Where completions go.
    pub(crate) completions: Completions,
    /// The end, once known.
    pub(crate) ended: watch::Sender<Option<QpEnd>>,
    /// Requests whose completion goes to a future instead of a CQ.
    pub(crate) waiters: Arc<Waiters>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The engine it belongs to last takes its counters.
        self.lock().retire_stats();
    }
}

impl Shared {
    pub(crate) fn new(
        num: QpNum,
        pd: crate::tpt::PdId,
        state: Connection,
        completions: Completions,
    ) -> Self {
        Self {
            num,
            pd,
            state: Mutex::new(state),
            wake: Notify::new(),
            wakes: AtomicU64::new(0),
            completions,
            ended: watch::channel(None).0,
            waiters: Arc::default(),
        }
    }

    /// Wakes the driver: there is work for it.
    pub(crate) fn wake_driver(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// How many times the driver was woken so far.
    pub(crate) fn wakes(&self) -> u64 {
        self.wakes.load(Ordering::Relaxed)
    }

    /// How many of the completions `st` collected go to the application's completion
    /// queues (whose delivery may wake its task), not to a sink.
    pub(crate) fn delivers_to_app(&self, st: &Connection) -> usize {
        if self.completions.any_id() {
            0
        } else {
            st.ready_count()
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Connection> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream's counters.
    pub(crate) fn stats(&self) -> rdmap::StreamStats {
        self.lock().stream().stats()
    }

    /// Takes its part of the push path out (it moves to another engine, which adopts it).
    pub(crate) fn take_push(&self) -> Option<Arc<crate::push::QpPush>> {
        self.lock().take_push()
    }

    /// Releases the lock, then delivers what the locked step collected
    /// ([`Connection::collect`]): completions to their futures and completion queues (in one
    /// batch per queue), and the end of the connection to [`Qp::closed`].
    pub(crate) fn unlock(&self, mut st: MutexGuard<'_, Connection>) {
        if !st.has_deliveries() {
            return;
        }
        let mut batch = SPARE.take();
        let end = st.take_deliveries(&mut batch);
        drop(st);
        self.deliver(&mut batch);
        SPARE.set(batch);
        if let Some(end) = end {
            self.ended.send_replace(Some(end));
        }
    }

    /// Releases the lock after a call on the connection, and does what it left to do:
    /// delivers, writes an inline transmit and hands it back, wakes the driver if it must
    /// run. With output claimed, nothing is delivered before it is handed back: no
    /// application code (a completion queue's waker, a sink) runs while the claim is
    /// out, so none can leave it out.
    pub(crate) fn release(&self, st: MutexGuard<'_, Connection>, next: Next) {
        let wake = match next {
            Next::Done => {
                self.unlock(st);
                false
            }
            Next::Driver => {
                self.unlock(st);
                true
            }
            Next::Write(mut w) => {
                drop(st);
                w.write();
                let mut st = self.lock();
                let wake = st.inline_written(w);
                self.unlock(st);
                wake
            }
        };
        if wake {
            self.wake_driver();
        }
    }

    /// Hands `batch` out (emptying it), as [`Completions::deliver`] says.
    fn deliver(&self, batch: &mut Vec<Completion>) {
        self.completions.deliver(self.num, &self.waiters, batch);
    }

    /// Refuses an id the layer above keeps for itself: with completion queues, those of
    /// per-request futures; with a sink, none.
    fn check_id(&self, id: rdmap::WrId) -> Result<(), PostError> {
        if self.completions.any_id() {
            return Ok(());
        }
        check_wr_id(id)
    }

    /// An id whose completion goes to a future ([`Waiters::register`]); refused if
    /// completions go to a sink (the future would never finish).
    fn future_id(&self) -> Result<rdmap::WrId, PostError> {
        if self.completions.any_id() {
            return Err(PostError::NoFutures);
        }
        Ok(self.waiters.register())
    }
}

/// A connected queue pair. Cheap to clone; clones share the queue pair.
///
/// Posting never waits: [`post_send`](Self::post_send) and [`post_recv`](Self::post_recv)
/// queue the request. A small send onto an idle send queue is written to the socket at once,
/// without blocking (inline transmit); otherwise the connection's driver task sends it.
/// Completions go where [`QpInit::completions`](crate::QpInit::completions) said at
/// connect/accept time.
#[derive(Clone, Debug)]
pub struct Qp {
    pub(crate) shared: Arc<Shared>,
}

impl Qp {
    /// This queue pair's number.
    pub fn num(&self) -> QpNum {
        self.shared.num
    }

    /// Its protection domain.
    pub fn pd(&self) -> crate::tpt::PdId {
        self.shared.pd
    }

    /// The addresses of its connection, this end's and the peer's (`None` once the
    /// connection ended and its socket is closed).
    pub fn addrs(&self) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
        self.shared.lock().addrs()
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.shared.lock().state()
    }

    /// The stream's counters (FPDUs sent and received, octets placed).
    pub fn stats(&self) -> rdmap::StreamStats {
        self.shared.lock().stream().stats()
    }

    /// Seed 000's push counters of this queue pair: requests executed from pushed
    /// messages, from the send queue, and discards by reason (all zero with the push
    /// path off).
    pub fn push_counters(&self) -> ipc::qpseg::PushCounters {
        self.shared
            .lock()
            .push()
            .map_or_else(Default::default, |p| p.counters())
    }

    /// The negotiated inbound and outbound Read/Atomic limits (IRD, ORD).
    pub fn ird_ord(&self) -> (u16, u16) {
        self.shared.lock().stream().ird_ord()
    }

    /// How the FPDUs are framed: CRC and markers as the MPA exchange settled them.
    pub fn framing(&self) -> rdmap::Framing {
        self.shared.lock().stream().framing()
    }

    /// The largest ULPDU this side sends in one FPDU: what one TCP segment holds, unless
    /// both sides agreed to large FPDUs.
    pub fn mulpdu(&self) -> u16 {
        self.shared.lock().stream().mulpdu()
    }

    /// Serves (`true`, the default) or refuses incoming RDMA Writes, Reads and Atomics:
    /// see [`rdmap::Stream::set_incoming_rdma`].
    pub fn set_incoming_rdma(&self, allowed: bool) {
        self.shared.lock().set_incoming_rdma(allowed);
    }

    /// What a request failing its local checks does: drain the send queue (`true`) or end
    /// the connection (`false`, the default); see
    /// [`rdmap::Stream::set_drain_on_local_failure`].
    pub fn set_drain_on_local_failure(&self, drain: bool) {
        self.shared.lock().set_drain_on_local_failure(drain);
    }

    /// Leaves the drained send queue state after a local failure.
    pub fn resume_send_queue(&self) {
        let mut st = self.shared.lock();
        st.resume_send_queue();
        self.shared.unlock(st);
    }

    /// True while the send queue is drained after a local failure.
    pub fn send_queue_drained(&self) -> bool {
        self.shared.lock().stream().send_queue_drained()
    }

    /// This stack's extensions both sides agreed to when the connection was set up.
    pub fn extensions(&self) -> rdmap::Extensions {
        self.shared.lock().stream().extensions()
    }

    /// True while octets wait for room in the socket or the stream has FPDUs to produce:
    /// the connection is back-pressured, and a pushed message would have to wait (seed
    /// 000's flow-controlled condition).
    pub fn tx_backlog(&self) -> bool {
        self.shared.lock().tx_backlog()
    }

    /// Shares this connection's socket with the application that owns the queue pair, for
    /// the push path that skips the daemon: the application writes small messages to it
    /// itself, under the transmit lock in `seg` (its queue pair segment), which this
    /// connection takes too before it sends. Only in RTS, once; the share ends when the
    /// queue pair leaves RTS or moves, and closing it then shuts the socket down. What the
    /// application writes counts in this connection's counters, and in `totals` as
    /// executed from pushed messages (or discarded).
    pub fn share_tx(
        &self,
        seg: Arc<ipc::qpseg::QpSegment>,
        totals: Arc<crate::push::PushShare>,
    ) -> std::io::Result<std::os::fd::OwnedFd> {
        let mut st = self.shared.lock();
        let fd = st.share_tx(seg, totals);
        self.shared.unlock(st);
        fd
    }

    /// Queues a send-queue work request. In the Error state it completes at once as
    /// flushed, so a queue pair can be drained by posting to it.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.shared.check_id(wr.wr_id)?;
        self.post_one(wr)
    }

    /// Posts one send request: by seed 000's push path when it runs for this queue pair,
    /// else through the send queue (written on this thread when small and the queue is
    /// idle).
    fn post_one(&self, wr: SendWr) -> Result<(), PostError> {
        let mut st = self.shared.lock();
        match st.post_send(wr) {
            Ok(next) => {
                self.shared.release(st, next);
                Ok(())
            }
            Err(e) => {
                self.shared.unlock(st);
                Err(e)
            }
        }
    }

    /// Queues the work requests of `wrs` in order, under one lock and with one wake-up of
    /// the driver (verbs' linked list of work requests): the driver then sends them
    /// together, many FPDUs per system call. On an error, `(queued, error)`: the first
    /// `queued` requests were queued, the next one failed and the rest were not tried.
    pub fn post_send_batch<I>(&self, wrs: I) -> Result<(), (usize, PostError)>
    where
        I: IntoIterator<Item = SendWr>,
    {
        let (queued, posted) = self.locked(|st| {
            let posted = st.post_send_batch(wrs, |wr| self.shared.check_id(wr.wr_id));
            (posted, true)
        });
        posted.map_err(|e| (queued, e))
    }

    /// Queues a receive buffer.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.shared.check_id(wr.wr_id)?;
        self.locked(|st| (st.post_recv(wr), false))
    }

    /// Posts `wr` with its completion routed to the returned future instead of the send
    /// CQ (the request is made signaled, and its `wr_id` is replaced by one from a range
    /// reserved for this purpose: ids with the top bit set).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned receiver does not cancel the request: it still runs, and its
    /// completion is discarded.
    pub fn post_send_notify(&self, mut wr: SendWr) -> Result<CompletionFuture, PostError> {
        let id = self.shared.future_id()?;
        wr.wr_id = id;
        wr.flags = wr.flags | rdmap::SendFlags::SIGNALED;
        self.post_one(wr)
            .inspect_err(|_| self.shared.waiters.forget(id))?;
        Ok(self.shared.waiters.future(id))
    }

    /// Posts a receive whose completion goes to the returned future instead of the
    /// receive CQ (see [`post_send_notify`](Self::post_send_notify)).
    pub fn post_recv_notify(&self, mut wr: RecvWr) -> Result<CompletionFuture, PostError> {
        let id = self.shared.future_id()?;
        wr.wr_id = id;
        self.locked(|st| (st.post_recv(wr), false))
            .inspect_err(|_| self.shared.waiters.forget(id))?;
        Ok(self.shared.waiters.future(id))
    }

    /// Busy-poll mode: reads what the socket holds right now and processes it on the
    /// caller's thread (placement, completions), instead of leaving it to the
    /// connection's driver task. An application that spins on its CQ calls this in the
    /// loop, as an RDMA application polls its RNIC: the message's completion then appears
    /// without the driver's wake-up in between; and a lone request too large to go out
    /// with its post is sent from here as far as the socket takes it. Returns true if
    /// anything arrived. Never blocks; other output and the end of the connection stay
    /// with the driver.
    pub fn poll_input(&self) -> bool {
        self.poll(false)
    }

    /// As [`poll_input`](Self::poll_input), and every request the send queue has to send
    /// is written from here too, as far as the socket takes it (while the driver holds
    /// nothing unwritten): the connection's work runs on the caller's thread. For an
    /// application whose thread spins anyway (a C program's poll loop), so that the
    /// driver is not a second busy thread on the same processors (BENCHMARKS.md, "C
    /// programs through the rdma-core library").
    pub fn poll_io(&self) -> bool {
        self.poll(true)
    }

    /// The caller stops polling (it is about to sleep): the driver reads the input again
    /// from now on, rather than once [`poll_input`](Self::poll_input)'s last call is a
    /// millisecond old (a message meanwhile would wait for that).
    pub fn stop_polling(&self) {
        let was = self.shared.lock().stop_polling();
        if was {
            self.shared.wake_driver();
        }
    }

    /// One busy poll; `all`: every request's output is written here, not only a lone one's.
    fn poll(&self, all: bool) -> bool {
        // The read runs outside the lock, as the driver's do: the input is claimed
        // meanwhile, so neither reads it twice.
        let claimed = self.shared.lock().claim_polled();
        let Some((mut input, sock)) = claimed else {
            return false;
        };
        let read = super::io::read_unlocked(&sock, &mut input);
        let mut st = self.shared.lock();
        let (got, next) = st.polled(input, read, all);
        self.shared.release(st, next);
        got
    }

    /// Starts a graceful close: posted send work finishes, then the connection closes.
    /// Returns at once; [`closed`](Self::closed) waits for the end.
    pub fn disconnect(&self) {
        let mut st = self.shared.lock();
        st.close();
        self.shared.unlock(st);
        self.shared.wake_driver();
    }

    /// Ends the queue pair at once with a Terminate carrying `code`, for a local error
    /// the peer must hear of (a completion queue that overflowed): outstanding work is
    /// flushed. Returns at once; [`closed`](Self::closed) waits for the end.
    pub fn terminate(&self, code: rdmap::TermCode) {
        self.locked(|st| {
            st.terminate(code);
            ((), true)
        });
    }

    /// Waits until the queue pair has ended and says how.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn closed(&self) -> QpEnd {
        let mut rx = self.shared.ended.subscribe();
        loop {
            if let Some(end) = *rx.borrow_and_update() {
                return end;
            }
            if rx.changed().await.is_err() {
                return QpEnd::ConnectionLost;
            }
        }
    }

    /// Runs a post `f` under the connection's lock, delivers what it produced after the
    /// lock is released, and wakes the driver if `f` says it must run.
    fn locked<T>(&self, f: impl FnOnce(&mut Connection) -> (T, bool)) -> T {
        let mut st = self.shared.lock();
        let (result, wake) = f(&mut st);
        self.shared.unlock(st);
        if wake {
            self.shared.wake_driver();
        }
        result
    }
}
