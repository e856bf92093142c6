//! [`State`]: what the connection's lock protects, and the step that turns the stream's
//! events into deliveries.

use std::sync::Arc;
use std::{fmt, io};

use bytes::BytesMut;
use rdmap::{Completion, Event, Memory, MemoryOps, QpEnd, QpNum, QpState, Stream, Transmit};

use super::io::{Io, Read};
use crate::engine::{Srq, Totals};
use crate::timeouts::Timeouts;
use crate::tpt::Tpt;

/// The engine a queue pair belongs to, which live migration changes: its memory table,
/// its part of the push path, its liveness limits and where its counters go when it is
/// gone.
#[derive(Debug)]
pub(crate) struct Home {
    pub(crate) tpt: Arc<Tpt>,
    pub(crate) push: Option<Arc<super::QpPush>>,
    pub(crate) timeouts: Timeouts,
    pub(crate) totals: Arc<Totals>,
}

/// The mutable half of a connection: the protocol state machine, this queue pair's view of
/// memory, the IO part, and what waits for delivery.
pub(crate) struct State {
    pub(crate) stream: Stream,
    pub(crate) mem: Box<dyn MemoryOps + Send>,
    /// The shared receive queue this queue pair draws on, an input of the stream.
    pub(crate) srq: Option<Srq>,
    /// The socket and the capture ([`Io`] alone touches them).
    pub(crate) io: Io,
    /// How the connection ended, once known.
    pub(crate) end: Option<QpEnd>,
    /// Octets read and not yet consumed by the stream (a partial FPDU).
    pub(crate) rx: BytesMut,
    /// The peer's FIN was read.
    pub(crate) rx_eof: bool,
    /// [`Qp::poll_input`](super::Qp::poll_input)'s read buffer (allocated on first use).
    pub(crate) poll_buf: Vec<u8>,
    /// When the application last polled the input itself: while it keeps polling, the
    /// driver does not wait for the socket to be readable (it would only be woken to find
    /// the input taken).
    pub(crate) polled_at: Option<std::time::Instant>,
    /// True while the driver holds octets not yet written: then only the driver writes,
    /// so an inline transmit must not put anything on the wire ahead of them.
    pub(crate) tx_busy: bool,
    /// What an inline transmit produced but the socket did not take; the driver sends it next.
    pub(crate) unwritten: Transmit,
    /// Completions produced under the lock, delivered after it is released.
    pub(crate) ready: Vec<Completion>,
    /// The end, to be published (to [`Qp::closed`](super::Qp::closed)) after the lock is
    /// released.
    pub(crate) publish_end: Option<QpEnd>,
    /// Seed 000's library-side state (see `push_slots`).
    pub(crate) push_policy: super::push_slots::Policy,
    /// The engine it belongs to now.
    pub(crate) home: Home,
    /// True while it moves to another engine: only the driver touches the socket and
    /// memory (no push, no inline write, no busy poll), and the driver parks.
    pub(crate) migrating: bool,
    /// Where the driver hands its socket over when it parks (see `migrate`).
    pub(crate) park: Option<ParkRequest>,
    /// Send requests waiting for queued registrations (see `held`).
    pub(crate) held: std::collections::VecDeque<rdmap::SendWr>,
    /// The send queue's depth, which held requests count against.
    pub(crate) sq_depth: usize,
}

impl State {
    /// A connection in its first state: `stream` over `mem`, with `rx` already read (the
    /// octets that came with the MPA handshake).
    pub(crate) fn new(
        stream: Stream,
        mem: Box<dyn MemoryOps + Send>,
        io: Io,
        rx: BytesMut,
        home: Home,
        sq_depth: usize,
    ) -> Self {
        Self {
            stream,
            mem,
            srq: None,
            io,
            end: None,
            rx,
            rx_eof: false,
            poll_buf: Vec::new(),
            polled_at: None,
            tx_busy: false,
            unwritten: Transmit::new(),
            ready: Vec::new(),
            publish_end: None,
            push_policy: Default::default(),
            home,
            migrating: false,
            park: None,
            held: Default::default(),
            sq_depth,
        }
    }

    /// One read of the socket: straight into registered memory when the stream has a
    /// payload coming there ([`Stream::direct_target`]), otherwise into `rx`. `now`: the
    /// application polls (the socket itself, not tokio's readiness).
    pub(crate) fn read_input(&mut self, now: bool) -> io::Result<Read> {
        let mem: &mut dyn Memory = self.mem.as_mut();
        if let Some(to) = self.stream.direct_target(&mut self.rx, mem) {
            let read = self.io.read_direct(&to, now)?;
            if let Read::Data(n) = read {
                self.stream.handle_direct(n);
            }
            return Ok(read);
        }
        if now {
            self.io.read_now(&mut self.poll_buf, &mut self.rx)
        } else {
            self.io.read(&mut self.rx)
        }
    }

    /// Feeds the octets read so far to the stream (placement happens here).
    pub(crate) fn process_input(&mut self) {
        if self.rx.is_empty() {
            return;
        }
        match &mut self.srq {
            Some(srq) => self
                .stream
                .handle_input_srq(&mut self.rx, self.mem.as_mut(), srq),
            None => self.stream.handle_input(&mut self.rx, self.mem.as_mut()),
        }
    }

    /// One turn of the connection, in the one order that is right: requests held for a
    /// registration that is done are released, the input read so far is processed (with
    /// the peer's FIN), output is produced into `out` (after what an inline transmit left
    /// unwritten, and up to `high_water` octets), the timers run, and the events are
    /// collected. After `shut_down` (TCP's sending half is closed) output is discarded.
    /// Returns the turn's one clock reading (tokio's clock, so paused time applies),
    /// taken once the work is done; `tx_busy` tells whether `out` holds octets.
    pub(crate) fn step(
        &mut self,
        num: QpNum,
        out: &mut Transmit,
        high_water: usize,
        shut_down: bool,
    ) -> tokio::time::Instant {
        if !self.held.is_empty() {
            self.release_held();
        }
        self.process_input();
        if self.rx_eof {
            self.stream.handle_eof(&mut self.rx);
        }
        if out.is_empty() && !self.unwritten.is_empty() {
            std::mem::swap(out, &mut self.unwritten);
        }
        if out.len() < high_water {
            let _ = self
                .stream
                .poll_transmit(self.mem.as_mut(), out, high_water);
        }
        if shut_down && !out.is_empty() {
            tracing::debug!(octets = out.len(), "output after close discarded");
            out.clear();
        }
        self.tx_busy = !out.is_empty();
        // A Delay that reached the head of the send queue starts now (its end is then a
        // deadline of poll_timeout).
        let now = tokio::time::Instant::now();
        self.stream.handle_timeout(now.into_std());
        self.collect(num);
        now
    }

    /// Moves the stream's events into `ready` and records how the connection ended. Call
    /// with the lock held after every call into the stream; the lock's holder then
    /// releases it with [`Shared::unlock`](super::Shared::unlock), which delivers.
    pub(crate) fn collect(&mut self, num: QpNum) {
        while let Some(ev) = self.stream.poll_event() {
            match ev {
                Event::Completion(mut wc) => {
                    let flagged = &mut self.push_policy.flagged;
                    if !flagged.is_empty()
                        && wc.queue == rdmap::Queue::Send
                        && let Some(at) = flagged.iter().position(|&id| id == wc.wr_id)
                    {
                        // Its pushed message was discarded: it ran from the send queue.
                        flagged.swap_remove(at);
                        wc.push_discarded = true;
                    }
                    self.ready.push(wc)
                }
                Event::TerminateSent(t) => {
                    tracing::info!(qp = %num, code = %t.code, "sent Terminate");
                    self.end.get_or_insert(QpEnd::Terminated(t.code));
                }
                Event::TerminateReceived(t) => {
                    tracing::info!(qp = %num, code = %t.code, "peer sent Terminate");
                    self.end.get_or_insert(QpEnd::TerminatedByPeer(t.code));
                }
                Event::StateChanged(s) => {
                    tracing::debug!(qp = %num, state = ?s, "state");
                    match s {
                        QpState::Idle => {
                            self.end.get_or_insert(QpEnd::Closed);
                        }
                        QpState::Error => {
                            self.end.get_or_insert(QpEnd::ConnectionLost);
                        }
                        _ => {}
                    }
                    if matches!(s, QpState::Idle | QpState::Error) {
                        self.publish_end = self.end;
                    }
                }
                Event::PeerClosed => {
                    self.end.get_or_insert(QpEnd::Closed);
                }
                other => tracing::trace!(qp = %num, event = ?other, "event"),
            }
        }
    }
}

/// A migration's request that the driver park, and where the driver answers.
#[derive(Debug)]
pub(crate) struct ParkRequest(pub(crate) tokio::sync::oneshot::Sender<Arc<tokio::net::TcpStream>>);

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("State")
            .field("stream", &self.stream)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}
