//! Queue pairs: the application's handle, and the state its IO driver shares with it.

use std::collections::HashMap;
use std::fmt;
use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;
use rdmap::{
    Completion, Event, Memory, PostError, QpState, Queue, RecvWr, SendWr, Stream, TermCode,
    Transmit, WrId,
};
use tokio::net::TcpStream;
use tokio::sync::{Notify, oneshot, watch};

use crate::cq::{Cq, Wc};
use crate::pcap::Tap;

/// The most [`Qp::poll_input`] reads at a time.
const POLL_READ: usize = 64 * 1024;

/// Work request ids with this bit set are reserved for requests whose completion goes to
/// a future ([`Qp::post_send_notify`]); applications use ids below it.
pub const NOTIFY_BIT: WrId = 1 << 63;

/// A queue pair number, unique within one engine.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpNum(pub u32);

impl fmt::Display for QpNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "qp{}", self.0)
    }
}

/// How a queue pair ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpEnd {
    /// Both sides closed gracefully.
    Closed,
    /// The peer sent this Terminate.
    TerminatedByPeer(TermCode),
    /// This side detected a fatal error and sent this Terminate.
    Terminated(TermCode),
    /// The TCP connection failed or the peer closed it without a graceful close.
    ConnectionLost,
}

impl fmt::Display for QpEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Closed => f.write_str("closed gracefully"),
            Self::TerminatedByPeer(c) => write!(f, "the peer sent a Terminate: {c}"),
            Self::Terminated(c) => write!(f, "sent a Terminate: {c}"),
            Self::ConnectionLost => f.write_str("the TCP connection was lost"),
        }
    }
}

/// The mutable half: the protocol state machine, this QP's view of memory, and what the
/// inline push path needs to write to the socket itself.
pub(crate) struct Core {
    pub(crate) stream: Stream,
    pub(crate) mem: Box<dyn Memory + Send>,
    pub(crate) end: Option<QpEnd>,
    /// The connection's capture (every octet written or read is recorded under this lock).
    pub(crate) tap: Tap,
    /// The socket, while the driver runs; `None` once it has ended.
    pub(crate) sock: Option<Arc<TcpStream>>,
    /// Octets read and not yet consumed by the stream (a partial FPDU).
    pub(crate) rx: BytesMut,
    /// The peer's FIN was read.
    pub(crate) rx_eof: bool,
    /// [`Qp::poll_input`]'s read buffer (allocated on its first use).
    pub(crate) poll_buf: Vec<u8>,
    /// When the application last polled the input itself: while it keeps polling, the
    /// driver does not wait for the socket to be readable (it would only be woken to
    /// find the input taken).
    pub(crate) polled_at: Option<std::time::Instant>,
    /// True while the driver holds octets not yet written: then only the driver writes,
    /// so the push path must not put anything on the wire ahead of them.
    pub(crate) tx_busy: bool,
    /// What the push path produced but the socket did not take; the driver sends it next.
    pub(crate) pushed: Transmit,
}

impl fmt::Debug for Core {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("stream", &self.stream)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// What the application handle and the driver share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) num: QpNum,
    pub(crate) core: Mutex<Core>,
    /// Wakes the driver: new work was posted.
    pub(crate) wake: Notify,
    pub(crate) send_cq: Cq,
    pub(crate) recv_cq: Cq,
    /// The end, once known.
    pub(crate) ended: watch::Sender<Option<QpEnd>>,
    /// Requests whose completion goes to a future instead of a CQ.
    pub(crate) waiters: Mutex<HashMap<(Queue, WrId), oneshot::Sender<Completion>>>,
    pub(crate) next_notify: AtomicU64,
    /// The engine's TPT, to release this queue pair's type 2 windows when it ends.
    pub(crate) tpt: Arc<crate::tpt::Tpt>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_waiters(&self) -> MutexGuard<'_, HashMap<(Queue, WrId), oneshot::Sender<Completion>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves the stream's events to the completion queues and records how it ended.
    /// Call with the core locked, after every call into the stream.
    pub(crate) fn dispatch(&self, core: &mut Core) {
        while let Some(ev) = core.stream.poll_event() {
            match ev {
                Event::Completion(wc) => {
                    if wc.wr_id & NOTIFY_BIT != 0 {
                        if let Some(tx) = self.lock_waiters().remove(&(wc.queue, wc.wr_id)) {
                            let _ = tx.send(wc);
                            continue;
                        }
                    }
                    let cq = match wc.queue {
                        Queue::Send => &self.send_cq,
                        Queue::Recv => &self.recv_cq,
                    };
                    cq.push(Wc { qp: self.num, wc });
                }
                Event::TerminateSent(t) => {
                    tracing::info!(qp = %self.num, code = %t.code, "sent Terminate");
                    core.end.get_or_insert(QpEnd::Terminated(t.code));
                }
                Event::TerminateReceived(t) => {
                    tracing::info!(qp = %self.num, code = %t.code, "peer sent Terminate");
                    core.end.get_or_insert(QpEnd::TerminatedByPeer(t.code));
                }
                Event::StateChanged(s) => {
                    tracing::debug!(qp = %self.num, state = ?s, "state");
                    match s {
                        QpState::Idle => {
                            core.end.get_or_insert(QpEnd::Closed);
                        }
                        QpState::Error => {
                            core.end.get_or_insert(QpEnd::ConnectionLost);
                        }
                        _ => {}
                    }
                    if let Some(end) = core
                        .end
                        .filter(|_| matches!(s, QpState::Idle | QpState::Error))
                    {
                        self.ended.send_replace(Some(end));
                    }
                }
                Event::PeerClosed => {
                    core.end.get_or_insert(QpEnd::Closed);
                }
                other => tracing::trace!(qp = %self.num, event = ?other, "event"),
            }
        }
    }
}

/// A connected queue pair. Cheap to clone; clones share the queue pair.
///
/// Posting never waits: [`post_send`](Self::post_send) and [`post_recv`](Self::post_recv)
/// queue the request. A small send onto an idle send queue is written to the socket at once,
/// without blocking (the push path); otherwise the connection's driver task sends it.
/// Completions arrive on the completion queues given at connect/accept time.
#[derive(Clone, Debug)]
pub struct Qp {
    pub(crate) shared: Arc<Shared>,
}

impl Qp {
    /// This queue pair's number.
    pub fn num(&self) -> QpNum {
        self.shared.num
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.shared.lock().stream.state()
    }

    /// The negotiated inbound and outbound Read/Atomic limits (IRD, ORD).
    pub fn ird_ord(&self) -> (u16, u16) {
        self.shared.lock().stream.ird_ord()
    }

    /// Queues a send-queue work request. In the Error state it completes at once as
    /// flushed, so a queue pair can be drained by posting to it.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        if wr.wr_id & NOTIFY_BIT != 0 {
            return Err(PostError::ReservedWrId);
        }
        let small = wr.op.payload_len() <= crate::push::PUSH_MAX_PAYLOAD;
        self.post(Queue::Send, small, |s| s.post_send(wr))
    }

    /// Queues a receive buffer.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        if wr.wr_id & NOTIFY_BIT != 0 {
            return Err(PostError::ReservedWrId);
        }
        self.post(Queue::Recv, false, |s| s.post_recv(wr))
    }

    /// Posts `wr` with its completion routed to the returned future instead of the send
    /// CQ (the request is made signaled, and its `wr_id` is replaced by one from a range
    /// reserved for this purpose: ids with the top bit set).
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned receiver does not cancel the request: it still runs, and its
    /// completion is discarded.
    pub fn post_send_notify(
        &self,
        mut wr: SendWr,
    ) -> Result<oneshot::Receiver<Completion>, PostError> {
        let (id, rx) = self.register_waiter(Queue::Send);
        wr.wr_id = id;
        wr.flags = wr.flags | rdmap::SendFlags::SIGNALED;
        let small = wr.op.payload_len() <= crate::push::PUSH_MAX_PAYLOAD;
        self.post(Queue::Send, small, |s| s.post_send(wr))
            .inspect_err(|_| self.forget_waiter(Queue::Send, id))?;
        Ok(rx)
    }

    /// Posts a receive whose completion goes to the returned future instead of the
    /// receive CQ (see [`post_send_notify`](Self::post_send_notify)).
    pub fn post_recv_notify(
        &self,
        mut wr: RecvWr,
    ) -> Result<oneshot::Receiver<Completion>, PostError> {
        let (id, rx) = self.register_waiter(Queue::Recv);
        wr.wr_id = id;
        self.post(Queue::Recv, false, |s| s.post_recv(wr))
            .inspect_err(|_| self.forget_waiter(Queue::Recv, id))?;
        Ok(rx)
    }

    fn register_waiter(&self, queue: Queue) -> (WrId, oneshot::Receiver<Completion>) {
        let id = NOTIFY_BIT | self.shared.next_notify.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.shared.lock_waiters().insert((queue, id), tx);
        (id, rx)
    }

    fn forget_waiter(&self, queue: Queue, id: WrId) {
        self.shared.lock_waiters().remove(&(queue, id));
    }

    /// Busy-poll mode: reads what the socket holds right now and processes it on the
    /// caller's thread (placement, completions), instead of leaving it to the
    /// connection's driver task. An application that spins on its CQ calls this in the
    /// loop, as an RDMA application polls its RNIC: the message's completion then appears
    /// without the driver's wake-up in between. Returns true if anything arrived. Never
    /// blocks; output the input calls for (Read Responses, a Terminate) and the end of the
    /// connection stay with the driver.
    pub fn poll_input(&self) -> bool {
        let mut core = self.shared.lock();
        let core = &mut *core;
        if core.rx_eof || !matches!(core.stream.state(), QpState::Rts | QpState::Closing) {
            return false;
        }
        core.polled_at = Some(std::time::Instant::now());
        // A read of the socket itself, not through tokio's readiness (which only the
        // runtime's poller updates): the octets may have arrived a moment ago. Into the
        // zeroed buffer kept for this, so that a poll that finds nothing costs no fill.
        core.poll_buf.resize(POLL_READ, 0);
        let read = match core.sock.as_deref() {
            Some(sock) => (&*socket2::SockRef::from(sock)).read(&mut core.poll_buf),
            None => return false,
        };
        if let Ok(n) = read {
            let (rx, got) = (&mut core.rx, core.poll_buf.get(..n).unwrap_or_default());
            rx.extend_from_slice(got);
            crate::driver::input_read(core, n);
        }
        let got = matches!(read, Ok(n) if n > 0);
        if got {
            core.stream.handle_input(&mut core.rx, core.mem.as_mut());
            self.shared.dispatch(core);
        }
        // An error, the FIN, a state change or output to send: the driver's work.
        let driver = matches!(&read, Err(e) if e.kind() != std::io::ErrorKind::WouldBlock)
            || core.rx_eof
            || core.stream.state() != QpState::Rts
            || core.stream.wants_transmit();
        if driver {
            self.shared.wake.notify_one();
        }
        got
    }

    /// Starts a graceful close: posted send work finishes, then the connection closes.
    /// Returns at once; [`closed`](Self::closed) waits for the end.
    pub fn disconnect(&self) {
        let mut core = self.shared.lock();
        core.stream.close(std::time::Instant::now());
        self.shared.dispatch(&mut core);
        drop(core);
        self.shared.wake.notify_one();
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

    /// Runs a post under the core lock. A receive only queues a buffer: the driver has
    /// nothing to do for it. A `small` send onto an idle send queue goes out on this
    /// thread (the push path); a large one, or one behind work in flight, is sent by the
    /// driver, pipelined and batched with the rest.
    fn post(
        &self,
        queue: Queue,
        small: bool,
        f: impl FnOnce(&mut Stream) -> Result<(), PostError>,
    ) -> Result<(), PostError> {
        let mut core = self.shared.lock();
        let push = small && core.stream.outstanding_sends() == 0;
        f(&mut core.stream)?;
        let wake = match queue {
            Queue::Recv => false,
            Queue::Send if push => crate::push::push(&mut core),
            Queue::Send => true,
        };
        self.shared.dispatch(&mut core);
        drop(core);
        if wake {
            self.shared.wake.notify_one();
        }
        Ok(())
    }
}
