//! [`Connection`]: one queue pair's connection state, what the connection's lock
//! protects. Its fields are private to this module, whose submodules are its parts:
//! - `app`: what the application's handle asks of it (posts, busy polls, close);
//! - `driven`: what the driver asks of it between its reads and writes;
//! - `inline_tx`: the inline transmit (a small send written by the posting thread);
//! - `push_post`: a post by seed 000's push path ([`crate::push`] decides);
//! - `park` and `image`: parking for live migration ([`crate::migration`]), and the
//!   image that crosses to another process.
//!
//! Built by one constructor ([`Connection::start`]); the driver's one step
//! ([`Connection::step`]) processes input, produces output, runs the timers and collects
//! the events, and every other call that feeds the stream collects its events itself, so
//! that releasing the lock ([`Shared::unlock`](crate::conn::Shared::unlock)) delivers
//! them.

mod app;
mod driven;
mod image;
mod inline_tx;
mod park;
mod push_post;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::{fmt, io};

use bytes::BytesMut;
use rdmap::{
    Completion, Event, Memory, MemoryOps, QpEnd, QpNum, QpState, Stream, TermCode, Transmit,
};

use crate::conn::io::{Input, Io, Read};
use crate::pcap::Tap;
use crate::push::{Gate, PushShare, QpPush, SharedTx};
use crate::srq::Srq;
use crate::stats::Totals;
use crate::timeouts::Timeouts;
use crate::tpt::Tpt;

pub(crate) use driven::Waits;
pub(crate) use image::{Prepared, QpImage};
pub(crate) use inline_tx::{Next, TX_HIGH_WATER};
pub(crate) use park::{ParkError, Parked};

/// The engine a queue pair belongs to, which live migration changes: its memory table,
/// its part of the push path, its liveness limits, its busy polling and where its
/// counters go when it is gone.
#[derive(Debug)]
pub(crate) struct Home {
    pub(crate) tpt: Arc<Tpt>,
    pub(crate) push: Option<Arc<QpPush>>,
    pub(crate) timeouts: Timeouts,
    pub(crate) totals: Arc<Totals>,
    /// How long after a connection last received its driver polls instead of sleeping
    /// ([`SocketOptions::busy_poll`](crate::SocketOptions::busy_poll)).
    pub(crate) busy_poll: std::time::Duration,
}

/// The mutable half of a connection: the protocol state machine, this queue pair's view of
/// memory, the IO part, and what waits for delivery.
pub(crate) struct Connection {
    /// Its queue pair's number (for the log).
    num: QpNum,
    stream: Stream,
    mem: Box<dyn MemoryOps + Send>,
    /// The shared receive queue this queue pair draws on, an input of the stream.
    srq: Option<Srq>,
    /// The socket and the capture ([`Io`] alone touches them).
    io: Io,
    /// How the connection ended, once known.
    end: Option<QpEnd>,
    /// Octets read and not yet consumed by the stream (a partial FPDU).
    rx: BytesMut,
    /// The driver is reading outside the lock (it holds `rx`, or reads into memory the
    /// stream named): nobody else reads or processes input meanwhile.
    rx_busy: bool,
    /// The peer's FIN was read.
    rx_eof: bool,
    /// When the application last polled the input itself: while it keeps polling, the
    /// driver does not wait for the socket to be readable (it would only be woken to find
    /// the input taken).
    polled_at: Option<std::time::Instant>,
    /// True while the driver holds octets not yet written: then only the driver writes,
    /// so an inline transmit must not put anything on the wire ahead of them.
    tx_busy: bool,
    /// True while a posting or polling thread writes what it produced outside the lock
    /// (see `inline_tx`): nobody else produces or writes meanwhile.
    tx_claimed: bool,
    /// What an inline transmit produced but the socket did not take; the driver sends it next.
    unwritten: Transmit,
    /// Completions produced under the lock, delivered after it is released.
    ready: Vec<Completion>,
    /// The end, to be published (to [`Qp::closed`](crate::conn::Qp::closed)) after the lock is
    /// released.
    publish_end: Option<QpEnd>,
    /// Seed 000's stop and resume rules on this side (see `push/qp.rs`).
    push_rules: ipc::push::PushPolicy,
    /// Payloads copied out of push slots are carved from this (one allocation per 64 KiB).
    push_arena: BytesMut,
    /// The engine it belongs to now.
    home: Home,
    /// True while it moves to another engine: only the driver touches the socket and
    /// memory (no push, no inline write, no busy poll), and the driver parks.
    migrating: bool,
    /// Where the driver hands its socket over when it parks (see `park`).
    park: Option<ParkRequest>,
    /// The socket is shared with the application that owns the queue pair, and this is
    /// the transmit lock's state (see `push/tx_share.rs`).
    tx_share: Option<SharedTx>,
    /// The application held the transmit lock: the driver looks again then.
    tx_retry: Option<std::time::Instant>,
}

impl Connection {
    /// Queue pair `num`'s connection in its first state: `stream` over `mem`, on `sock`
    /// (captured by `tap`), with `rx` already read (the octets that came with the MPA
    /// handshake), in `home`, drawing on `srq`.
    pub(crate) fn start(
        num: QpNum,
        (stream, mem): (Stream, Box<dyn MemoryOps + Send>),
        (sock, tap): (Arc<std::net::TcpStream>, Tap),
        rx: BytesMut,
        (home, srq): (Home, Option<Srq>),
    ) -> Self {
        Self {
            num,
            stream,
            mem,
            srq,
            io: Io::new(sock, tap),
            end: None,
            rx,
            rx_busy: false,
            rx_eof: false,
            polled_at: None,
            tx_busy: false,
            tx_claimed: false,
            unwritten: Transmit::new(),
            ready: Vec::new(),
            publish_end: None,
            push_rules: ipc::push::PushPolicy::new(0),
            push_arena: BytesMut::new(),
            home,
            migrating: false,
            park: None,
            tx_share: None,
            tx_retry: None,
        }
    }

    /// Shares the socket with the application that owns the queue pair, with the stream's
    /// transmit state in `seg` (the push path that skips the daemon). Only while
    /// connected and in RTS, once.
    pub(super) fn share_tx(
        &mut self,
        seg: Arc<ipc::qpseg::QpSegment>,
        totals: Arc<PushShare>,
    ) -> io::Result<OwnedFd> {
        if self.stream.state() != QpState::Rts || self.migrating {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the queue pair is not connected",
            ));
        }
        if self.tx_share.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "the socket is shared already",
            ));
        }
        let fd = self.io.share()?;
        let mut share = SharedTx::grant(seg, totals, &self.stream);
        share.settle(&self.stream, self.unwritten.is_empty() && !self.tx_busy);
        self.tx_share = Some(share);
        Ok(fd)
    }

    /// May the stream produce output now? With a shared socket, only while this side
    /// holds the transmit lock (taken here); outside RTS or while moving, the share ends.
    fn tx_gate(&mut self) -> bool {
        let Some(share) = &mut self.tx_share else {
            return true;
        };
        if self.stream.state() != QpState::Rts || self.migrating {
            return self.revoke_tx();
        }
        if !self.stream.wants_transmit() {
            return true;
        }
        match share.acquire(&mut self.stream) {
            Gate::Open => {
                self.tx_retry = None;
                true
            }
            Gate::Wait(at) => {
                self.tx_retry = Some(at);
                false
            }
            Gate::Torn => {
                self.torn();
                self.revoke_tx()
            }
        }
    }

    /// After a write: lets the application have the stream if this side is done with it
    /// (`out_empty`: nothing waits for the socket).
    fn settle_tx(&mut self, out_empty: bool) {
        // Octets a thread writes outside the lock are not written yet to the stream, which
        // is then not quiet (`Stream::tx_quiet`): the lock stays with this side meanwhile.
        let empty = out_empty && self.unwritten.is_empty();
        if let Some(share) = &mut self.tx_share {
            share.settle(&self.stream, empty);
        }
    }

    /// Ends the socket's share for good once the application is not writing to it (false
    /// while it holds the transmit lock: `tx_retry` says when to try again); a stream the
    /// application left in the middle of an FPDU ends this connection.
    fn revoke_tx(&mut self) -> bool {
        let Some(share) = &mut self.tx_share else {
            return true;
        };
        match share.revoke(&mut self.stream) {
            Gate::Wait(at) => {
                self.tx_retry = Some(at);
                return false;
            }
            Gate::Torn => self.torn(),
            Gate::Open => {}
        }
        self.tx_share = None;
        self.tx_retry = None;
        true
    }

    /// The application's lease ran out in the middle of an FPDU: the stream may be torn.
    fn torn(&mut self) {
        tracing::warn!("the application's write to its shared socket was cut short");
        self.stream.terminate(TermCode::MPA_LOCAL_CATASTROPHIC);
    }

    /// A claim of the input, to read outside the lock (the driver's, or a busy poll's): registered memory the
    /// stream names ([`Stream::direct_target`]), or the octets read so far, taken out to
    /// be read onto. `None` if it is claimed already.
    pub(super) fn claim_input(&mut self) -> Option<Input> {
        if self.rx_busy {
            return None;
        }
        self.rx_busy = true;
        let mem: &mut dyn Memory = self.mem.as_mut();
        Some(match self.stream.direct_target(&mut self.rx, mem) {
            Some(to) => Input::Direct(to),
            None => Input::Buffer(std::mem::take(&mut self.rx)),
        })
    }

    /// The claimed input back, with what the read outside the lock found: recorded and
    /// counted, the stream told of octets read into memory, the FIN noted.
    pub(super) fn return_input(
        &mut self,
        input: Input,
        read: io::Result<usize>,
    ) -> io::Result<Read> {
        self.rx_busy = false;
        let got = match read {
            Ok(n) => Ok(self.io.took(&input, n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read::Nothing),
            Err(e) => Err(e),
        };
        match input {
            Input::Buffer(rx) => self.rx = rx,
            Input::Direct(_) => {
                if let Ok(Read::Data(n)) = got {
                    self.stream.handle_direct(n);
                }
            }
        }
        if let Ok(Read::Eof) = got {
            self.rx_eof = true;
        }
        got
    }

    /// Feeds the octets read so far to the stream (placement happens here).
    fn process_input(&mut self) {
        // While a read outside the lock holds the input (a busy poll's, as the driver
        // turns), its octets come back with it and are processed then.
        if self.rx.is_empty() || self.rx_busy {
            return;
        }
        match &mut self.srq {
            Some(srq) => self
                .stream
                .handle_input_srq(&mut self.rx, self.mem.as_mut(), srq),
            None => self.stream.handle_input(&mut self.rx, self.mem.as_mut()),
        }
    }

    /// One turn of the connection, in the one order that is right: the input read so far
    /// is processed (with the peer's FIN), output is produced into `out` (after what an
    /// inline transmit left unwritten, and up to `high_water` octets), the timers run, and
    /// the events are collected. After `shut_down` (TCP's sending half is closed) output is discarded.
    /// Returns the turn's one clock reading (tokio's clock, so paused time applies),
    /// taken once the work is done; `tx_busy` tells whether `out` holds octets.
    pub(super) fn step(
        &mut self,
        out: &mut Transmit,
        high_water: usize,
        shut_down: bool,
    ) -> tokio::time::Instant {
        self.process_input();
        // The peer's FIN flushes what is outstanding: not before the octets a thread is
        // writing outside the lock are accounted for (they were sent, and complete).
        if self.rx_eof && !self.tx_claimed {
            self.stream.handle_eof(&mut self.rx);
        }
        if out.is_empty() && !self.unwritten.is_empty() {
            std::mem::swap(out, &mut self.unwritten);
        }
        // While a thread writes an inline transmit outside the lock, output waits for it.
        if out.len() < high_water && !self.tx_claimed && self.tx_gate() {
            let _ = self
                .stream
                .poll_transmit(self.mem.as_mut(), out, high_water);
        }
        if shut_down && !out.is_empty() {
            tracing::debug!(octets = out.len(), "output after close discarded");
            out.clear();
        }
        self.tx_busy = !out.is_empty();
        self.settle_tx(out.is_empty());
        // A Delay that reached the head of the send queue starts now (its end is then a
        // deadline of poll_timeout).
        let now = tokio::time::Instant::now();
        self.stream.handle_timeout(now.into_std());
        self.collect();
        now
    }

    /// Moves the stream's events into `ready` and records how the connection ended. Call
    /// with the lock held after every call into the stream; the lock's holder then
    /// releases it with [`Shared::unlock`](crate::conn::Shared::unlock), which delivers.
    fn collect(&mut self) {
        let num = self.num;
        while let Some(ev) = self.stream.poll_event() {
            match ev {
                Event::Completion(wc) => self.ready.push(wc),
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
pub(crate) struct ParkRequest(pub(crate) tokio::sync::oneshot::Sender<Arc<std::net::TcpStream>>);

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("stream", &self.stream)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}
