//! The push path that skips the daemon (issue 33): iwarpd shares a queue pair's socket with
//! this library, and a small Send or RDMA Write posted onto an empty send queue is framed
//! and written to the socket on the application's thread. The request is complete when the
//! socket took its octets (siw's semantics); nothing of it goes through the daemon (which
//! is only rung if its servant sleeps, so that the peer's answer is read by a thread that
//! is awake).
//!
//! Both writers of the stream agree through the transmit share in the queue pair's segment
//! ([`ipc::qpseg::TxShare`]): the library writes only while it holds the lock, which the
//! daemon's connection holds whenever it has anything to send; it frames the FPDU at the
//! stream's point (the last Send MSN, the position for markers) and writes that point back
//! before it lets go. A message that cannot go this way (the send queue is not empty, the
//! stream or the socket is busy) goes through the send queue, flagged as a discarded push.

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ipc::qpseg::{Discard, QpSegment, TxPoint};
use mpa::Framer;
use rdmap::pushed::{PushedOp, frame_pushed};
use rustix::net::SendFlags;

/// How long a write whose socket filled up part-way keeps waiting for room (beating the
/// lease meanwhile) before the library gives the message up; the daemon then finds the
/// stream torn and ends this connection.
const PART_WAIT: Duration = Duration::from_secs(1);

/// The largest payload written to the shared socket from the application's thread:
/// one that a socket with room takes whole. A larger FPDU that the socket took only part
/// of would hold the posting thread until the peer drained it (and, past a second, end
/// the connection), so larger messages go through the daemon.
pub(super) const DIRECT_MAX: usize = 16 * 1024;

/// What became of a message offered to the socket.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    /// On the wire: the request is complete.
    Sent,
    /// Not written: it goes through the send queue, for this reason.
    Discarded(Discard),
    /// Not a message for this path (too long for one FPDU): the send queue, unflagged.
    NotForPush,
    /// Part of it was written and the rest could not be: the connection is lost.
    Broken,
}

/// A queue pair's socket, shared by the daemon.
#[derive(Debug)]
pub(super) struct SharedSocket {
    fd: OwnedFd,
    /// The FPDU being written (kept, so no message allocates).
    frame: BytesMut,
    /// Room for the payload of a message gathered from the application's regions
    /// ([`DIRECT_MAX`] octets, kept too).
    payload: Vec<u8>,
    /// The daemon ended the share, or a write failed: no more pushing this way.
    off: bool,
}

impl SharedSocket {
    pub(super) fn new(fd: OwnedFd) -> Self {
        Self {
            fd,
            frame: BytesMut::with_capacity(512),
            payload: vec![0; DIRECT_MAX],
            off: false,
        }
    }

    /// The payload room, to gather a message into (give it back with
    /// [`put_payload`](Self::put_payload)).
    pub(super) fn take_payload(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.payload)
    }

    /// Gives the payload buffer back, for the next message.
    pub(super) fn put_payload(&mut self, payload: Vec<u8>) {
        self.payload = payload;
    }

    /// True while messages may be offered.
    pub(super) fn is_on(&self, seg: &QpSegment) -> bool {
        !self.off && seg.tx_share().is_on()
    }

    /// Writes `op` of `payload` to the socket if the stream is the library's to write now;
    /// `sq_empty`: every request posted before has retired.
    pub(super) fn push(
        &mut self,
        seg: &QpSegment,
        op: PushedOp,
        payload: &[u8],
        sq_empty: bool,
    ) -> Pushed {
        let share = seg.tx_share();
        if !sq_empty {
            share.count_discard(Discard::NotAtHead);
            return Pushed::Discarded(Discard::NotAtHead);
        }
        let Some(word) = share.client_lock() else {
            share.count_discard(Discard::FlowControl);
            return Pushed::Discarded(Discard::FlowControl);
        };
        let framing = share.framing();
        let at = share.point();
        let mut framer = Framer::at(framing.markers, framing.crc, at.position);
        let send_msn = at.send_msn.wrapping_add(u32::from(op.is_send()));
        self.frame.clear();
        let framed = frame_pushed(
            op,
            send_msn,
            payload,
            framing.mulpdu,
            &mut framer,
            &mut self.frame,
        );
        let Some(len) = framed else {
            share.client_unlock(word);
            return Pushed::NotForPush;
        };
        share.set_intent(len as u32);
        let outcome = match self.write_all(seg) {
            Ok(()) => {
                let send_msn = if op.is_send() { send_msn } else { at.send_msn };
                share.set_point(TxPoint {
                    send_msn,
                    position: framer.position(),
                });
                share.count_pushed(&op, payload.len() as u64, len as u64);
                share.set_intent(0);
                Pushed::Sent
            }
            Err(0) => {
                share.set_intent(0);
                share.count_discard(Discard::FlowControl);
                Pushed::Discarded(Discard::FlowControl)
            }
            // Part of an FPDU is on the wire: `intent` stays, so the daemon knows.
            Err(_) => {
                self.off = true;
                Pushed::Broken
            }
        };
        if !share.client_unlock(word) {
            // The daemon took the lock over meanwhile (this thread stalled past its lease)
            // or ended the share: the stream is no longer this library's to write.
            self.off = true;
        }
        outcome
    }

    /// Writes the whole frame: `Err(written)` if it could not (nothing written and the
    /// socket full: `Err(0)`; the connection failed, or stayed full part-way: the count).
    fn write_all(&mut self, seg: &QpSegment) -> Result<(), usize> {
        let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
        let mut off = 0;
        let mut since: Option<Instant> = None;
        while off < self.frame.len() {
            match rustix::net::send(&self.fd, &self.frame[off..], flags) {
                Ok(n) => off += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) if off == 0 => return Err(0),
                Err(rustix::io::Errno::AGAIN) => {
                    // Part of the FPDU is out: the rest must follow before anything else.
                    let start = *since.get_or_insert_with(Instant::now);
                    if start.elapsed() > PART_WAIT {
                        return Err(off);
                    }
                    seg.tx_share().heartbeat();
                    let _ = wait_writable(&self.fd);
                }
                Err(_) => {
                    if off == 0 {
                        // The connection failed: the daemon sees it too and ends it; the
                        // message takes the send queue and is flushed with the rest.
                        self.off = true;
                        return Err(0);
                    }
                    return Err(off);
                }
            }
        }
        Ok(())
    }
}

/// Waits up to 10 ms for room in the socket.
fn wait_writable(fd: &OwnedFd) -> io::Result<()> {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(fd, PollFlags::OUT)];
    let ten_ms = Timespec {
        tv_sec: 0,
        tv_nsec: 10_000_000,
    };
    poll(&mut fds, Some(&ten_ms))?;
    Ok(())
}
