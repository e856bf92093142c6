//! [`Qp`]: a connected queue pair, its raw (non-blocking) verbs, and [`QpConfig`].
//! The async per-request methods live in `ops.rs`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use ipc::control::QpChange;
#[cfg(feature = "embedded")]
use offload_engine::QpInit;
use rdmap::{Extensions, Framing, PostError, QpState, RecvWr, SendWr};

use crate::daemon::qp::DaemonQp;

#[cfg(feature = "embedded")]
use crate::cq::SrqImpl;
use crate::cq::{Cq, Srq};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::stats::QpStats;
use rdmap::{QpEnd, QpNum};

/// What a new queue pair is made of: where its completions go, and an optional shared
/// receive queue.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct QpConfig {
    /// Where send-queue completions go.
    pub send_cq: Cq,
    /// Where receive-queue completions go.
    pub recv_cq: Cq,
    /// A shared receive queue to draw on when the queue pair's own receive queue is empty.
    pub srq: Option<Srq>,
    /// Receives posted before the connection carries data (see [`QpConfig::recv`]).
    pub recvs: Vec<RecvWr>,
}

impl QpConfig {
    /// All completions go to `cq`; no shared receive queue.
    pub fn new(cq: &Cq) -> Self {
        Self {
            send_cq: cq.clone(),
            recv_cq: cq.clone(),
            srq: None,
            recvs: Vec::new(),
        }
    }

    /// Posts `wr` before the connection carries any data. On the accepting side this is the
    /// way to have a buffer ready for the peer's first Send, which may arrive as soon as
    /// the peer has the MPA Reply (before [`Incoming::accept`](crate::Incoming::accept)
    /// returns).
    pub fn recv(mut self, wr: RecvWr) -> Self {
        self.recvs.push(wr);
        self
    }

    /// Receive-queue completions go to `cq` instead.
    pub fn recv_cq(mut self, cq: &Cq) -> Self {
        self.recv_cq = cq.clone();
        self
    }

    /// Draw receive buffers from `srq` when the queue pair's own receive queue is empty.
    pub fn srq(mut self, srq: &Srq) -> Self {
        self.srq = Some(srq.clone());
        self
    }

    /// The engine's queue pair settings; an error if the shared receive queue is not the
    /// embedded engine's.
    #[cfg(feature = "embedded")]
    pub(crate) fn to_init(
        &self,
        pd: offload_engine::tpt::PdId,
    ) -> Result<QpInit, crate::ConnectError> {
        let mut init = QpInit::new(pd, &self.send_cq.inner);
        init.completions =
            offload_engine::Completions::queues(&self.send_cq.inner, &self.recv_cq.inner);
        init.srq = match self.srq.as_ref().map(|s| &s.inner) {
            None => None,
            #[cfg(feature = "embedded")]
            Some(SrqImpl::Embedded { queue, .. }) => Some(queue.clone()),
            Some(SrqImpl::Daemon(_)) => return Err(other_device_srq()),
        };
        init.recvs = self.recvs.clone();
        Ok(init)
    }
}

impl QpConfig {
    /// Refuses initial receives whose work request id is in the reserved range (top bit
    /// set), as `Qp::post_recv` does.
    pub(crate) fn check_recvs(&self) -> Result<(), crate::ConnectError> {
        for wr in &self.recvs {
            cq::check_wr_id(wr.wr_id).map_err(|e| {
                crate::ConnectError::Invalid(format!("initial receive {:#x}: {e}", wr.wr_id))
            })?;
        }
        Ok(())
    }
}

/// The error for a queue pair given a shared receive queue of another device.
pub(crate) fn other_device_srq() -> crate::ConnectError {
    crate::ConnectError::Invalid(
        "the shared receive queue belongs to another device: create it with the device \
         that creates the queue pair"
            .into(),
    )
}

/// The queue pair behind a [`Qp`]: in this process's engine, or in iwarpd.
pub(crate) enum QpImpl {
    #[cfg(feature = "embedded")]
    Embedded(offload_engine::Qp),
    Daemon(Box<DaemonQp>),
}

macro_rules! either {
    ($qp:expr, $q:ident => $e:expr) => {
        match $qp {
            #[cfg(feature = "embedded")]
            QpImpl::Embedded($q) => $e,
            QpImpl::Daemon($q) => $e,
        }
    };
}

impl QpImpl {
    pub(crate) fn num(&self) -> QpNum {
        either!(self, q => q.num())
    }
    fn counters(&self) -> ipc::control::Counters {
        match self {
            #[cfg(feature = "embedded")]
            Self::Embedded(q) => ipc::control::Counters {
                traffic: q.stats(),
                push: q.push_counters(),
            },
            Self::Daemon(q) => q.counters(),
        }
    }
    fn state(&self) -> QpState {
        either!(self, q => q.state())
    }
    fn ird_ord(&self) -> (u16, u16) {
        either!(self, q => q.ird_ord())
    }
    fn mulpdu(&self) -> u16 {
        either!(self, q => q.mulpdu())
    }
    fn framing(&self) -> Framing {
        either!(self, q => q.framing())
    }
    fn extensions(&self) -> Extensions {
        either!(self, q => q.extensions())
    }
    fn modify(&self, change: QpChange) {
        match self {
            #[cfg(feature = "embedded")]
            Self::Embedded(q) => match change {
                QpChange::IncomingRdma(on) => q.set_incoming_rdma(on),
                QpChange::DrainOnLocalFailure(on) => q.set_drain_on_local_failure(on),
                QpChange::ResumeSendQueue => q.resume_send_queue(),
            },
            Self::Daemon(q) => q.modify(change),
        }
    }
    fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        either!(self, q => q.post_send(wr))
    }
    fn post_send_batch<I: IntoIterator<Item = SendWr>>(
        &self,
        wrs: I,
    ) -> Result<(), (usize, PostError)> {
        either!(self, q => q.post_send_batch(wrs))
    }
    fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        either!(self, q => q.post_recv(wr))
    }
    pub(crate) fn post_send_notify(&self, wr: SendWr) -> Result<cq::CompletionFuture, PostError> {
        either!(self, q => q.post_send_notify(wr))
    }
    pub(crate) fn post_recv_notify(&self, wr: RecvWr) -> Result<cq::CompletionFuture, PostError> {
        either!(self, q => q.post_recv_notify(wr))
    }
    fn disconnect(&self) {
        either!(self, q => q.disconnect())
    }
    async fn closed(&self) -> QpEnd {
        either!(self, q => q.closed().await)
    }
    fn poll_input(&self) -> bool {
        either!(self, q => q.poll_input())
    }
    fn poll_io(&self) -> bool {
        either!(self, q => q.poll_io())
    }
}

pub(crate) struct Inner {
    pub(crate) qp: QpImpl,
    pub(crate) pd: Pd,
    /// An 8-octet sink for the original values of Atomics run by the async methods (the
    /// value comes back in the completion; what lands here is never read).
    pub(crate) scratch: OnceLock<Mr>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: close gracefully (a no-op unless in RTS).
        self.qp.disconnect();
    }
}

/// A connected queue pair. Cheap to clone; clones share it. When the last clone is dropped
/// the queue pair disconnects gracefully.
///
/// Two ways to work with it:
///
/// * **Raw verbs**: [`post_send`](Self::post_send) and [`post_recv`](Self::post_recv)
///   never wait and fail fast ([`PostError::QueueFull`], [`PostError::Closing`]);
///   completions of signaled requests (and of every failed one) go to the completion
///   queues of the [`QpConfig`]. Work request ids with the top bit set
///   (2^63 and above) are reserved for the async methods and refused
///   ([`PostError::ReservedWrId`]).
/// * **Async methods** ([`send`](Self::send), [`write`](Self::write),
///   [`read`](Self::read), [`recv`](Self::recv), ...): each posts one request whose
///   completion goes to the returned future, **not** to a completion queue.
///
/// A Send, Write or Immediate Data completes once the TCP socket has accepted all of its
/// octets (as in siw), not when the peer has placed them; a Read or Atomic completes once
/// its response has been placed here. Requests on one queue pair complete in order.
#[derive(Clone)]
pub struct Qp {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("num", &self.num())
            .field("pd", &self.inner.pd)
            .field("state", &self.state())
            .finish()
    }
}

impl Qp {
    #[cfg(feature = "embedded")]
    pub(crate) fn new(qp: offload_engine::Qp, pd: Pd) -> Self {
        Self::with(QpImpl::Embedded(qp), pd)
    }

    pub(crate) fn from_daemon(qp: DaemonQp, pd: Pd) -> Self {
        Self::with(QpImpl::Daemon(Box::new(qp)), pd)
    }

    fn with(qp: QpImpl, pd: Pd) -> Self {
        Self {
            inner: Arc::new(Inner {
                qp,
                pd,
                scratch: OnceLock::new(),
            }),
        }
    }

    /// Its number, unique within its device.
    pub fn num(&self) -> QpNum {
        self.inner.qp.num()
    }

    /// Its counters. Through iwarpd this asks the daemon (a round trip on the control
    /// socket).
    pub fn stats(&self) -> QpStats {
        self.inner.qp.counters()
    }

    /// The current state: [`QpState::Rts`] while connected.
    pub fn state(&self) -> QpState {
        self.inner.qp.state()
    }

    /// The negotiated inbound and outbound RDMA Read/Atomic limits (IRD, ORD).
    pub fn ird_ord(&self) -> (u16, u16) {
        self.inner.qp.ird_ord()
    }

    /// The most octets (DDP header and payload) this side puts in one FPDU: what one TCP
    /// segment holds on this path, or up to 64 KiB when both sides agreed to
    /// [large FPDUs](crate::DeviceConfig::large_fpdus).
    pub fn mulpdu(&self) -> u16 {
        self.inner.qp.mulpdu()
    }

    /// How its FPDUs are framed: MPA CRC and markers as the connection's MPA exchange
    /// settled them (CRC is on when either side asked for it, so it can be on here
    /// although this side did not ask).
    pub fn framing(&self) -> Framing {
        self.inner.qp.framing()
    }

    /// This stack's extensions the peer agreed to when the connection was set up (none
    /// with Linux siw, a hardware RNIC, or a peer that turned them off): Send with
    /// Immediate Data ([`Qp::send_imm`]) and RDMA Read V2 need them.
    pub fn extensions(&self) -> Extensions {
        self.inner.qp.extensions()
    }

    /// Posts `wr` (made signaled) with its completion routed to the returned future.
    pub(crate) fn post_notify(&self, wr: SendWr) -> Result<cq::CompletionFuture, PostError> {
        self.inner.qp.post_send_notify(wr)
    }

    /// Serves (`true`, the default) or refuses the peer's RDMA on this queue pair (seed
    /// 004's switch: "some adapters refuse incoming RDMA"). Refused, an RDMA Write, Read or
    /// Atomic from the peer that would touch memory ends the connection with an RDMAP
    /// access-rights Terminate and touches nothing, whatever rights the STag it names
    /// carries; Sends still arrive, and this side's own Reads and Writes still work. It
    /// holds for every segment that arrives after the call returns. Any peer: nothing
    /// changes on the wire until the peer breaks the rule.
    pub fn set_incoming_rdma(&self, allowed: bool) {
        self.inner.qp.modify(QpChange::IncomingRdma(allowed));
    }

    /// What a request that fails its local checks does (a fast registration, bind or
    /// Local Invalidate that fails; a Send or Write whose local memory fails), seed 001's
    /// two options. `false` (the default): the connection ends with a Terminate and all
    /// work is flushed. `true`: only the send queue is drained: the failed request
    /// completes with its error, every later request (queued, or posted afterwards)
    /// completes as [`Flushed`](crate::WcStatus::Flushed), and the rest goes on (receives,
    /// the peer's Reads, requests already under way) until
    /// [`resume_send_queue`](Self::resume_send_queue); the peer notices nothing.
    pub fn set_drain_on_local_failure(&self, drain: bool) {
        self.inner.qp.modify(QpChange::DrainOnLocalFailure(drain));
    }

    /// Leaves the drained send queue state after a local failure: requests posted from
    /// now on run again (repost the failed one and those flushed after it).
    pub fn resume_send_queue(&self) {
        self.inner.qp.modify(QpChange::ResumeSendQueue);
    }

    /// Its protection domain.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// Queues a send-queue work request without waiting. Its completion (if it is
    /// signaled, or fails) goes to the send CQ. In the Error state the request completes
    /// at once as flushed, so a dead queue pair can be drained by posting to it.
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.inner.qp.post_send(wr)
    }

    /// Queues the send-queue work requests of `wrs` in order, without waiting, under one
    /// lock and with one wake-up of the engine (verbs' linked list of work requests), so
    /// that they go out together, many per system call: how a bandwidth loop posts. On an
    /// error, `(queued, error)`: the first `queued` requests were queued, the next one
    /// failed, the rest were not tried.
    pub fn post_send_batch<I>(&self, wrs: I) -> Result<(), (usize, PostError)>
    where
        I: IntoIterator<Item = SendWr>,
    {
        self.inner.qp.post_send_batch(wrs)
    }

    /// Queues a receive buffer without waiting. Its completion goes to the receive CQ.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        self.inner.qp.post_recv(wr)
    }

    /// Starts a graceful close: posted send work finishes, then the connection closes and
    /// the peer's queue pair ends too. Returns at once; [`closed`](Self::closed) waits.
    pub fn disconnect(&self) {
        self.inner.qp.disconnect();
    }

    /// Waits until the queue pair has ended and says how: a graceful close, a Terminate
    /// (sent or received, with its code), or a lost connection.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn closed(&self) -> QpEnd {
        self.inner.qp.closed().await
    }

    /// Busy-poll mode: processes what the connection's socket holds right now on this
    /// thread, so a completion appears without waiting for the driver task. Call it in a
    /// loop that spins on [`Cq::poll`](crate::Cq::poll) (as perftest's latency tests
    /// spin). Returns true if anything arrived; never blocks. Output the input calls for
    /// (Read Responses, a Terminate) and the end of the connection stay with the engine's
    /// driver, and so do many requests in flight.
    pub fn poll_input(&self) -> bool {
        self.inner.qp.poll_input()
    }

    /// As [`poll_input`](Self::poll_input), and, embedded, what the send queue has to
    /// send is written on this thread too: the whole connection runs on the polling
    /// thread while it polls. For a loop that spins on a thread of its own (not a task
    /// of the runtime the engine runs on), where the engine's thread would be a second
    /// busy thread on the same processors. Returns true if anything arrived; never
    /// blocks.
    pub fn poll_io(&self) -> bool {
        self.inner.qp.poll_io()
    }
}
