//! The per-QP stream state machine: RDMAP over DDP over MPA, sans-IO.
//!
//! A [`Stream`] is created once the MPA handshake is done (see [`mpa::Handshake`]) and owns
//! everything that happens in FPDU mode on one connection: the send queue and receive queue,
//! segmentation, placement through [`Memory`], Read and Atomic responses, IRD/ORD limits,
//! the RFC 6581 RTR exchange, Terminate generation and reception, and the QP states.
//!
//! It follows the quinn-proto `Connection` model. Methods come in four kinds:
//! - inputs: [`handle_input`](Stream::handle_input) (bytes read from TCP),
//!   [`handle_written`](Stream::handle_written) (bytes the TCP socket accepted),
//!   [`handle_eof`](Stream::handle_eof) (the peer's FIN),
//!   [`handle_timeout`](Stream::handle_timeout) (time passed);
//! - commands: [`post_send`](Stream::post_send), [`post_recv`](Stream::post_recv),
//!   [`close`](Stream::close), [`terminate`](Stream::terminate);
//! - outputs: [`poll_transmit`](Stream::poll_transmit), [`poll_event`](Stream::poll_event)
//!   and [`poll_timeout`](Stream::poll_timeout), to be called after every input or command;
//! - getters such as [`state`](Stream::state).
//!
//! # Completion semantics
//!
//! A Send, RDMA Write or Immediate Data request completes when every octet of its last FPDU
//! has been accepted by the TCP socket, which the driver reports with `handle_written` (what
//! siw does). An RDMA Read or Atomic completes when its response has been placed. Send-queue
//! completions are reported in posting order, receive-queue completions in arrival order.
//! A request that fails or is flushed always completes, signaled or not.

mod checks;
mod direct;
mod rx;
pub(crate) mod snapshot;
mod transmit;
mod tx;

pub use snapshot::SnapshotError;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mpa::{Deframer, Extensions, Framer, Negotiated, Role, Rtr, RtrFlags};

use crate::memory::{Memory, MemoryOps, NoSharedRecv, SharedRecv};
use crate::term::TermCode;
use crate::wire::TerminateRepr;
use crate::work::{Completion, Queue, RecvWr, SendWr, WcOpcode, WcStatus};

pub(crate) use direct::Direct;
pub use direct::DirectTarget;
use rx::RxState;
pub use transmit::Transmit;
use tx::{Flush, TxState};

/// Static settings of a stream.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct StreamConfig {
    /// Send-queue depth: posted send requests not yet completed.
    pub sq_depth: usize,
    /// Receive-queue depth: posted receive requests not yet completed.
    pub rq_depth: usize,
    /// Largest ULPDU this side sends (MULPDU, RFC 5044 §4.5); at least 128.
    pub mulpdu: u16,
    /// How long a graceful close may take: from [`Stream::close`] until the peer's FIN.
    /// Past it the connection counts as lost and everything is flushed.
    pub close_timeout: Duration,
}

impl Default for StreamConfig {
    /// 256-deep queues, the MULPDU of a 1460-octet Ethernet MSS without markers, and a
    /// 10-second close timeout.
    fn default() -> Self {
        Self {
            sq_depth: 256,
            rq_depth: 256,
            mulpdu: mpa::mulpdu(1460, false),
            close_timeout: Duration::from_secs(10),
        }
    }
}

/// The RDMAP stream (queue pair) states of RFC 5040 as siw names them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum QpState {
    /// No connection: a queue pair that is not connected yet (the engine's state), or a
    /// stream after a graceful close completed in both directions.
    Idle,
    /// Ready to send: normal operation.
    Rts,
    /// Graceful close requested: outstanding send work finishes, then the driver closes TCP.
    Closing,
    /// A Terminate is queued or being sent; everything else is flushed.
    Terminate,
    /// Dead: every request completes as flushed.
    Error,
}

/// Something the driver must act on, from [`Stream::poll_event`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Event {
    /// A work request finished.
    Completion(Completion),
    /// The stream changed state.
    StateChanged(QpState),
    /// We detected a fatal error and queued this Terminate; it goes out with the next
    /// transmit, after which the stream is in [`QpState::Error`].
    TerminateSent(TerminateRepr),
    /// The peer sent this Terminate; the stream is in [`QpState::Error`].
    TerminateReceived(TerminateRepr),
    /// Responder only: the first FPDU (the RTR in peer-to-peer mode) arrived, so this side
    /// may now transmit (RFC 5044 §7.1.2 rule 4).
    Ready,
    /// After [`Stream::close`]: all send work is done; the driver may shut down TCP's
    /// sending half.
    Drained,
    /// The peer closed its half of the connection cleanly: between messages, with nothing
    /// of this side's left to send or answer (otherwise the stream just ends in Error).
    PeerClosed,
}

/// Why a post was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PostError {
    /// The queue already holds its configured depth of requests.
    QueueFull,
    /// The stream is closing; new send work is not accepted.
    Closing,
    /// The work request id lies in a range the layer above reserves for itself (the
    /// engine keeps ids with the top bit set for requests whose completion goes to a
    /// future).
    ReservedWrId,
    /// The scatter/gather list is longer than the queue's entries hold.
    TooManySges {
        /// The most an entry holds.
        max: usize,
    },
    /// A request posted with a future on a queue pair whose completions all go to one
    /// sink (the future would never finish).
    NoFutures,
    /// An owned payload larger than the queue pair can ever hold for sending: through
    /// iwarpd, its staging area (a registered buffer has no such limit).
    PayloadTooLarge {
        /// The most it holds, in octets.
        max: usize,
    },
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::QueueFull => f.write_str("queue full: wait for completions before posting more"),
            Self::Closing => f.write_str("the queue pair is closing and takes no new send work"),
            Self::ReservedWrId => f.write_str(
                "work request ids with the top bit set are reserved for the per-request \
                 futures: use ids below 2^63",
            ),
            Self::TooManySges { max } => write!(
                f,
                "a scatter/gather list longer than the {max} entries a queue entry holds: \
                 split the buffer or register it as one region"
            ),
            Self::NoFutures => f.write_str(
                "this queue pair's completions all go to its sink: post without a future",
            ),
            Self::PayloadTooLarge { max } => write!(
                f,
                "an owned (Bytes) payload larger than the {max} octets of this queue pair's \
                 staging area in iwarpd: register the buffer and send it as a gather list"
            ),
        }
    }
}

impl std::error::Error for PostError {}

/// Counters for observability.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct StreamStats {
    /// FPDUs transmitted.
    pub fpdus_sent: u64,
    /// FPDUs received.
    pub fpdus_received: u64,
    /// Payload octets placed into local memory.
    pub bytes_placed: u64,
    /// Payload octets sent straight from registered shared memory, with no copy.
    pub bytes_sent_in_place: u64,
    /// Payload octets read from the socket straight into registered memory, with no copy
    /// ([`Stream::direct_target`]).
    pub bytes_received_in_place: u64,
    /// DDP payload octets sent, per RDMAP opcode (indexed by its value, 0x0..=0xF; see
    /// [`Opcode`](crate::wire::Opcode)).
    pub octets_sent: [u64; OPCODES],
    /// DDP payload octets received in segments that passed validation, per RDMAP opcode.
    pub octets_received: [u64; OPCODES],
    /// Terminate messages sent.
    pub terminates_sent: u64,
    /// Terminate messages received.
    pub terminates_received: u64,
}

/// The RDMAP opcodes with a meaning: 0x0 to 0xB (RFC 5040 and RFC 7306) and the
/// extension's Send with Immediate Data variants 0xC to 0xF.
pub const OPCODES: usize = 16;

impl StreamStats {
    /// Adds `len` octets of `op` to `per_opcode` (unknown opcodes are not counted: they
    /// never pass validation and are never sent).
    fn count(per_opcode: &mut [u64; OPCODES], op: crate::wire::Opcode, len: usize) {
        if let Some(n) = per_opcode.get_mut(usize::from(u8::from(op))) {
            *n += len as u64;
        }
    }

    /// Adds `other`'s counts to these (device totals from queue pairs' counters).
    pub fn add(&mut self, other: &Self) {
        self.fpdus_sent += other.fpdus_sent;
        self.fpdus_received += other.fpdus_received;
        self.bytes_placed += other.bytes_placed;
        self.bytes_sent_in_place += other.bytes_sent_in_place;
        self.bytes_received_in_place += other.bytes_received_in_place;
        for (a, b) in self.octets_sent.iter_mut().zip(other.octets_sent) {
            *a += b;
        }
        for (a, b) in self.octets_received.iter_mut().zip(other.octets_received) {
            *a += b;
        }
        self.terminates_sent += other.terminates_sent;
        self.terminates_received += other.terminates_received;
    }
}

/// One RDMAP stream in FPDU mode: RDMAP over DDP over MPA for one connection, sans-IO.
///
/// Inputs are `handle_*`, commands `post_*`, `close` and `terminate`, outputs `poll_*`
/// (call them after every input or command). A Send, Write or Immediate completes once
/// the socket accepted all its octets ([`handle_written`](Self::handle_written)); a Read
/// or Atomic once its response is placed; send-queue completions come in posting order.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Stream {
    cfg: StreamConfig,
    role: Role,
    state: QpState,
    ird: u16,
    ord: u16,
    /// This stack's extensions both sides agreed to in the MPA exchange.
    extensions: Extensions,
    /// Incoming RDMA (Writes, Reads and Atomics that touch memory) is served; when false
    /// each is refused with an access-rights Terminate (seed 004's switch).
    incoming_rdma: bool,
    framer: Framer,
    deframer: Deframer,
    tx: TxState,
    rx: RxState,
    events: VecDeque<Event>,
    stats: StreamStats,
    #[serde(with = "crate::stream::snapshot::deadline")]
    close_deadline: Option<Instant>,
}

impl Stream {
    /// A stream for a connection whose MPA handshake produced `negotiated`.
    ///
    /// An Initiator in peer-to-peer mode sends its RTR first; a Responder sends nothing
    /// until the first FPDU has arrived.
    pub fn new(cfg: StreamConfig, negotiated: &Negotiated) -> Self {
        let p2p = negotiated.p2p;
        let rtr_out = (p2p && negotiated.role == Role::Initiator)
            .then(|| first_rtr(negotiated.rtr))
            .flatten();
        let rtr_in = if p2p && negotiated.role == Role::Responder {
            negotiated.rtr
        } else {
            RtrFlags::NONE
        };
        Self {
            tx: TxState::new(rtr_out),
            rx: RxState::new(negotiated.role == Role::Responder, p2p, rtr_in),
            cfg,
            role: negotiated.role,
            state: QpState::Rts,
            ird: negotiated.ird,
            ord: negotiated.ord,
            extensions: negotiated.extensions,
            incoming_rdma: true,
            framer: Framer::from_negotiated(negotiated),
            deframer: Deframer::from_negotiated(negotiated),
            events: VecDeque::new(),
            stats: StreamStats::default(),
            close_deadline: None,
        }
    }

    /// A stream that must send `code` as its only FPDU: for MPA negotiation failures found
    /// after FPDU mode began (insufficient IRD, no matching RTR; RFC 6581 §8).
    pub fn failed(cfg: StreamConfig, negotiated: &Negotiated, code: TermCode) -> Self {
        let mut s = Self::new(cfg, negotiated);
        s.tx.rtr = None;
        s.fatal(code, None, None);
        s
    }

    // ---- commands ----------------------------------------------------------------------

    /// Queues a send-queue work request. In [`QpState::Error`] and [`QpState::Terminate`],
    /// and while the send queue is drained after a local failure, it completes as flushed
    /// (so draining works as in verbs), once the requests posted before it have completed:
    /// send completions always come in posting order.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        let flushed = match self.state {
            QpState::Closing => return Err(PostError::Closing),
            QpState::Error | QpState::Terminate | QpState::Idle => true,
            // Seed 001's Send Queue Drained: flushed until resume_send_queue.
            QpState::Rts => self.tx.sq_drained,
        };
        if flushed {
            // Through the in-flight list, so that it completes after the requests posted
            // before it (a Terminate keeps those already on their way to the socket, and
            // a drained send queue lets Reads under way finish): send completions keep
            // posting order, which the layer above may count on.
            let seq = self.tx.start(&wr);
            self.tx.finish(seq, WcStatus::Flushed, None);
            self.release_completions();
            return Ok(());
        }
        if self.tx.outstanding() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        self.tx.sq.push_back(wr);
        Ok(())
    }

    /// Queues a receive buffer for one incoming Send or Immediate Data message.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if matches!(
            self.state,
            QpState::Error | QpState::Terminate | QpState::Idle
        ) {
            self.push_completion(Completion::new(
                wr.wr_id,
                Queue::Recv,
                WcOpcode::Recv,
                WcStatus::Flushed,
            ));
            return Ok(());
        }
        if self.rx.outstanding() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        self.rx.recv.push_back(wr);
        Ok(())
    }

    /// Starts a graceful close at time `now`: send work already posted still runs; once it
    /// is done, [`Event::Drained`] tells the driver to shut down TCP's sending half. If the
    /// peer has not closed its half within [`StreamConfig::close_timeout`], the connection
    /// counts as lost (see [`poll_timeout`](Self::poll_timeout)).
    pub fn close(&mut self, now: Instant) {
        if self.state == QpState::Rts {
            self.close_deadline = Some(now + self.cfg.close_timeout);
            self.set_state(QpState::Closing);
            self.check_drained();
        }
    }

    /// Serves (`true`, the default) or refuses incoming RDMA: with `false`, an RDMA Write,
    /// RDMA Read Request or Atomic Request from the peer that would touch memory ends the
    /// stream with an RDMAP access-rights Terminate (0x01/0x02, the headers copied), and
    /// nothing is placed or read, whatever rights the peer's STag carries. Zero-length
    /// Writes and Reads (RTRs among them) touch nothing and still pass. Sends are not
    /// RDMA and are always taken. Takes effect for the next segment that arrives (seed
    /// 004: "some adapters refuse incoming RDMA").
    pub fn set_incoming_rdma(&mut self, allowed: bool) {
        self.incoming_rdma = allowed;
    }

    /// What a request that fails its local checks (a fast registration, bind or Local
    /// Invalidate that fails, a Send or Write whose local memory fails) does to the
    /// stream, seed 001's two options: `false` (the default) ends the stream with a
    /// Terminate, everything flushed; `true` drains the send queue instead: the failed
    /// request completes with its error, every later one (queued or posted afterwards)
    /// completes as flushed, and the stream goes on otherwise (receives, the peer's Reads
    /// and requests already under way) until [`resume_send_queue`](Self::resume_send_queue).
    pub fn set_drain_on_local_failure(&mut self, drain: bool) {
        self.tx.drain_on_local_failure = drain;
    }

    /// Reports every send-queue request when it ends (`true`), unsignaled ones too, in
    /// posting order, each completion carrying its request's flags
    /// ([`Completion::flags`]): for a layer above that must know when each request's
    /// resources are free (iwarpd retires its clients' ring entries so) and passes on
    /// only the completions its requests asked for. Default `false`: as verbs, an
    /// unsignaled request that succeeds reports nothing.
    pub fn set_complete_every_send(&mut self, every: bool) {
        self.tx.complete_every_send = every;
    }

    /// Leaves the drained send queue state: requests posted from now on run again.
    pub fn resume_send_queue(&mut self) {
        self.tx.sq_drained = false;
    }

    /// True while the send queue is drained after a local failure.
    pub fn send_queue_drained(&self) -> bool {
        self.tx.sq_drained
    }

    /// Aborts the stream with a Terminate carrying `code` and no copied headers (a local
    /// error, RFC 5040 §7.1 rule 1), flushing all outstanding work.
    pub fn terminate(&mut self, code: TermCode) {
        self.fatal(code, None, None);
    }

    // ---- inputs ------------------------------------------------------------------------

    /// Feeds bytes read from TCP. Consumes whole FPDUs from `src`; a partial FPDU stays
    /// there for the next call. Places data through `mem`. Call `poll_transmit` and
    /// `poll_event` afterwards. For a queue pair without a shared receive queue:
    /// [`handle_input_srq`](Self::handle_input_srq) with [`NoSharedRecv`].
    pub fn handle_input(&mut self, src: &mut BytesMut, mem: &mut dyn Memory) {
        self.handle_input_srq(src, mem, &mut NoSharedRecv);
    }

    /// [`handle_input`](Self::handle_input) for a queue pair that draws on a shared
    /// receive queue: a Send or Immediate Data that finds this stream's own receive queue
    /// empty takes a receive from `srq`. The queue is shared by many streams, so it is an
    /// input of the call, not state of the stream.
    pub fn handle_input_srq(
        &mut self,
        src: &mut BytesMut,
        mem: &mut dyn Memory,
        srq: &mut dyn SharedRecv,
    ) {
        if self.rx.accepting() && !self.direct_input(src, mem) {
            return;
        }
        while self.rx.accepting() {
            match self.deframer.decode(src) {
                Ok(Some(ulpdu)) => {
                    self.stats.fpdus_received += 1;
                    self.on_ulpdu(&ulpdu, mem, srq);
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "MPA error");
                    self.fatal(TermCode::llp(e.code()), None, None);
                }
            }
        }
        // Once a fatal error was found, later bytes are dropped unread (RFC 5041 §7.2).
        src.clear();
    }

    /// Reports that the TCP socket accepted `n` more octets of what `poll_transmit`
    /// produced. Completes Sends, Writes and Immediate Data whose bytes are all accepted.
    pub fn handle_written(&mut self, n: usize) {
        self.tx.written += n as u64;
        while let Some(&(end, seq)) = self.tx.wait_written.front() {
            if end > self.tx.written {
                break;
            }
            self.tx.wait_written.pop_front();
            self.tx.finish(seq, WcStatus::Success, None);
        }
        if self.state == QpState::Terminate && self.tx.term.is_none() && self.tx.all_written() {
            self.set_state(QpState::Error);
        }
        self.release_completions();
        self.check_drained();
    }

    /// Reports that time `now` has come. A close that did not finish in time ends in
    /// [`QpState::Error`] with all outstanding work flushed. A Delay request that reached
    /// the head of the send queue starts at the first call after it got there, so a driver
    /// calls this on every turn, not only at [`poll_timeout`](Self::poll_timeout)'s
    /// deadline (which then includes the Delay's end).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.delay_timeout(now);
        if self.close_deadline.is_some_and(|d| now >= d) {
            self.close_deadline = None;
            if self.state == QpState::Closing {
                tracing::debug!("close timed out");
                self.rx.stop();
                self.flush(Flush::All(None));
                self.set_state(QpState::Error);
            }
        }
    }

    /// Reports the peer's FIN. Any buffered partial FPDU is an error; outstanding receives
    /// are flushed. After a completed [`close`](Self::close) the stream ends in
    /// [`QpState::Idle`]; otherwise the connection was lost and it ends in
    /// [`QpState::Error`] with everything flushed.
    pub fn handle_eof(&mut self, src: &mut BytesMut) {
        let mut cut = true;
        if let Err(e) = self.deframer.decode_eof(src) {
            tracing::debug!(error = %e, "partial FPDU at FIN");
        } else if self.rx.direct.is_some() {
            tracing::debug!("partial FPDU at FIN (payload placed directly)");
        } else {
            cut = false;
        }
        self.rx.eof = true;
        self.close_deadline = None;
        // A close by the peer is clean only between messages with nothing of ours left
        // to send or answer; otherwise the connection was lost under our work.
        if !cut && self.tx.is_idle() {
            self.events.push_back(Event::PeerClosed);
        }
        let graceful = self.state == QpState::Closing && self.tx.is_idle();
        if !matches!(self.state, QpState::Error | QpState::Idle) {
            self.flush(Flush::All(None));
            self.set_state(if graceful {
                QpState::Idle
            } else {
                QpState::Error
            });
        }
    }

    // ---- outputs -----------------------------------------------------------------------

    /// Appends whole FPDUs to `out` until at least `max` octets were added or nothing is
    /// left to send; returns the number of octets added. Reads local data through `mem`.
    /// Call it after every input or command, and whenever the socket has room again; report
    /// what the socket accepted with [`handle_written`](Self::handle_written).
    #[must_use]
    pub fn poll_transmit(
        &mut self,
        mem: &mut dyn MemoryOps,
        out: &mut Transmit,
        max: usize,
    ) -> usize {
        let start = out.len();
        while out.len() - start < max {
            if !self.transmit_one(mem, out) {
                break;
            }
        }
        self.release_completions();
        out.len() - start
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next, if ever. Call it
    /// again after every input and command.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        [self.close_deadline, self.delay_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The next event, if any. Call it until it returns `None` after every input, command
    /// and `poll_transmit`.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ---- getters -----------------------------------------------------------------------

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// Initiator or Responder.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The negotiated inbound (IRD) and outbound (ORD) Read/Atomic limits.
    pub fn ird_ord(&self) -> (u16, u16) {
        (self.ird, self.ord)
    }

    /// This stack's extensions both sides agreed to (none with a standard peer).
    pub fn extensions(&self) -> Extensions {
        self.extensions
    }

    /// How the FPDUs are framed: CRC and markers as the MPA exchange settled them.
    pub fn framing(&self) -> mpa::Framing {
        mpa::Framing {
            crc: self.framer.crc(),
            markers_tx: self.framer.markers(),
            markers_rx: self.deframer.markers(),
        }
    }

    /// The largest ULPDU (DDP header and payload) this side puts in one FPDU.
    pub fn mulpdu(&self) -> u16 {
        self.cfg.mulpdu
    }

    /// Send-queue work requests posted and not yet completed (queued or in flight).
    pub fn outstanding_sends(&self) -> usize {
        self.tx.outstanding()
    }

    /// True while this side waits on something: a posted request not complete, a
    /// response owed, octets not yet written, or an FPDU whose payload is being read
    /// straight into memory. (A partial FPDU the caller still holds is the caller's to
    /// count.)
    pub fn has_outstanding(&self) -> bool {
        self.tx.outstanding() > 0 || !self.tx.is_idle() || self.rx.direct.is_some()
    }

    /// Where the transmit side stands for another writer of the stream (the push path
    /// that skips the daemon): the last MSN of untagged queue 0 and the stream position.
    pub fn tx_point(&self) -> (u32, u64) {
        (self.tx.last_msn(0), self.framer.position())
    }

    /// Continues from where another writer left the stream: it sent FPDUs up to position
    /// `pos` and Sends up to MSN `send_msn` (see [`tx_point`](Self::tx_point)).
    /// Call it only while [`tx_quiet`](Self::tx_quiet): the octets in between count as
    /// written.
    pub fn set_tx_point(&mut self, send_msn: u32, pos: u64) {
        self.tx.set_last_msn(0, send_msn);
        let others = pos.wrapping_sub(self.framer.position());
        self.tx.skip(others);
        self.framer.set_position(pos);
    }

    /// True when the transmit side has nothing to send and every octet it produced was
    /// written: another writer may put whole FPDUs on the stream now.
    pub fn tx_quiet(&self) -> bool {
        !self.tx.has_work() && self.tx.term.is_none() && self.tx.all_written()
    }

    /// True if something is waiting to be transmitted right now.
    pub fn wants_transmit(&self) -> bool {
        self.tx.term.is_some() || (self.may_send() && self.tx.has_work())
    }

    /// True when no send work, owed response or unwritten octet remains: after
    /// [`close`](Self::close), the driver may then shut down TCP's sending half.
    pub fn is_drained(&self) -> bool {
        self.tx.is_idle()
    }

    /// Counters.
    pub fn stats(&self) -> StreamStats {
        self.stats
    }

    /// Counts FPDUs the application framed with [`frame_pushed`](crate::pushed::frame_pushed)
    /// and wrote to a shared socket itself: `fpdus` of them, with their payload octets per
    /// opcode. They are this stream's as much as its own.
    pub fn count_pushed(&mut self, fpdus: u64, octets: &[(crate::wire::Opcode, u64)]) {
        // Saturating: the counts come from another process.
        self.stats.fpdus_sent = self.stats.fpdus_sent.saturating_add(fpdus);
        for &(op, n) in octets {
            if let Some(c) = self.stats.octets_sent.get_mut(usize::from(u8::from(op))) {
                *c = c.saturating_add(n);
            }
        }
    }

    // ---- internals shared by rx and tx -------------------------------------------------

    fn may_send(&self) -> bool {
        matches!(self.state, QpState::Rts | QpState::Closing) && self.rx.peer_started
    }

    fn set_state(&mut self, state: QpState) {
        if self.state != state {
            tracing::debug!(from = ?self.state, to = ?state, "qp state");
            self.state = state;
            self.events.push_back(Event::StateChanged(state));
        }
    }

    fn push_completion(&mut self, wc: Completion) {
        self.events.push_back(Event::Completion(wc));
    }

    /// Moves finished send-queue requests, in posting order, to the event queue.
    fn release_completions(&mut self) {
        while let Some(wc) = self.tx.pop_finished() {
            self.push_completion(wc);
        }
    }

    fn check_drained(&mut self) {
        if self.state == QpState::Closing && self.tx.is_idle() && !self.tx.drained_reported {
            self.tx.drained_reported = true;
            self.events.push_back(Event::Drained);
        }
    }

    /// Enters the Terminate state: queues a Terminate for `code` (with the offending
    /// segment's headers when given) and flushes every outstanding request. Only the first
    /// error counts (RFC 5040 §7.1 rule 4).
    fn fatal(&mut self, code: TermCode, ulpdu: Option<&[u8]>, rdma_header: Option<[u8; 28]>) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        let term = rx::build_terminate(code, ulpdu, rdma_header);
        tracing::debug!(?code, "sending Terminate");
        self.events.push_back(Event::TerminateSent(term));
        self.tx.term = Some(term);
        self.rx.stop();
        self.flush(Flush::KeepSent);
        self.set_state(QpState::Terminate);
    }

    /// Completes every outstanding request in error (see [`Flush`]).
    fn flush(&mut self, how: Flush) {
        self.tx.flush(how);
        self.release_completions();
        for wr in self.rx.drain() {
            self.push_completion(Completion::new(
                wr,
                Queue::Recv,
                WcOpcode::Recv,
                WcStatus::Flushed,
            ));
        }
    }
}

/// The RTR an Initiator sends: the one type the handshake chose.
fn first_rtr(flags: RtrFlags) -> Option<Rtr> {
    [
        (RtrFlags::WRITE, Rtr::Write),
        (RtrFlags::READ, Rtr::Read),
        (RtrFlags::SEND, Rtr::Send),
    ]
    .into_iter()
    .find(|(f, _)| flags.contains(*f))
    .map(|(_, r)| r)
}

#[cfg(test)]
mod tests;
