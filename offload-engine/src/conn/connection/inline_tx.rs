//! Inline transmit (the low-latency doorbell): a post produces the FPDUs of a small
//! request under the connection's lock and writes them to the socket on the caller's
//! thread, with the lock released, instead of waking the connection's driver task to do
//! it. That saves a task wake-up (and often a cross-thread futex wake) on every message,
//! which is most of a small message's cost.
//!
//! Ordering on the wire is kept by two rules, checked under the lock:
//! - the caller produces only when the driver holds nothing unwritten
//!   (`Connection::tx_busy` is false);
//! - while the caller writes what it produced (`Connection::tx_claimed`), nobody else
//!   produces or writes: the driver's turn leaves output alone, another post leaves it to
//!   the driver, and the driver does not park for a migration. Nor does the connection
//!   end under it: the peer's FIN and this side's wait, so that octets already sent
//!   complete rather than flush.
//!
//! The caller then hands back what the socket did not take ([`Connection::inline_written`]):
//! it is left in `Connection::unwritten` with `tx_busy` set, and the driver sends it
//! before anything else.

use std::net::TcpStream;
use std::sync::Arc;

use rdmap::{QpState, Transmit};

use super::Connection;
use crate::conn::io::{send_now, write_unlocked};

/// The largest payload a post sends on the caller's thread. Small messages are where the
/// saved wake-up matters; large ones go faster through the driver, which keeps the
/// sender's CRC and copies off the application's thread (measured: 64 KiB Writes with
/// CRC sent inline ran at half the rate).
pub(crate) const INLINE_MAX_PAYLOAD: u32 = 16 * 1024;

/// Octets queued for the socket before the driver stops asking the stream for more.
pub(crate) const TX_HIGH_WATER: usize = 256 * 1024;

/// The most one inline transmit produces and writes on the caller's thread; the driver does the rest.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// What a call on the connection leaves to its caller once the lock is released.
#[must_use]
pub(crate) enum Next {
    /// Nothing.
    Done,
    /// Wake the driver: it has work.
    Driver,
    /// Write this with the lock released ([`InlineWrite::write`]), then hand it back
    /// under the lock ([`Connection::inline_written`]): `Shared::release` does both.
    Write(InlineWrite),
}

/// Output a thread produced under the lock and writes outside it.
#[must_use]
pub(crate) struct InlineWrite {
    /// What is left to write (the connection's own buffer, lent).
    out: Transmit,
    sock: Arc<TcpStream>,
    /// The capture's copy of what was written, while a capture records.
    copy: Option<Vec<u8>>,
    /// Octets written.
    written: usize,
    /// The producer stopped at its limit: more may be left to send.
    more: bool,
}

impl InlineWrite {
    /// Writes as much as the socket takes now, never blocking. An error leaves the rest
    /// to the driver, whose own write meets it again and ends the connection.
    pub(crate) fn write(&mut self) {
        let sock = &*self.sock;
        while !self.out.is_empty() {
            match write_unlocked(|s| send_now(sock, s), &mut self.out, self.copy.as_mut()) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.written += n,
            }
        }
    }
}

/// Queues `wr` on the send queue, and sends it from this thread if it is small and the
/// queue was idle (the inline doorbell); otherwise the driver sends it.
pub(crate) fn post_queued(
    st: &mut Connection,
    wr: rdmap::SendWr,
) -> Result<Next, rdmap::PostError> {
    // A Delay starts on the driver's clock: the driver must run, never the inline path.
    let delay = matches!(wr.op, rdmap::SendOp::Delay { .. });
    let inline =
        !delay && wr.op.payload_len() <= INLINE_MAX_PAYLOAD && st.stream.outstanding_sends() == 0;
    st.stream.post_send(wr)?;
    Ok(if inline {
        transmit(st, INLINE_MAX)
    } else {
        Next::Driver
    })
}

/// Produces up to `max` octets of what the stream has to send now, for this thread to
/// write, if nobody else is sending; else the driver must run (it has a backlog, another
/// thread writes, or the state is not RTS).
pub(crate) fn transmit(st: &mut Connection, max: usize) -> Next {
    // No socket: the connection ended, and the driver finishes it.
    let Some(sock) = st.io.socket() else {
        return Next::Driver;
    };
    if st.tx_busy
        || st.tx_claimed
        || st.migrating
        || st.stream.state() != QpState::Rts
        || !st.tx_gate()
    {
        return Next::Driver;
    }
    let produced = st
        .stream
        .poll_transmit(st.mem.as_mut(), &mut st.unwritten, max);
    if produced == 0 {
        return Next::Done;
    }
    st.tx_claimed = true;
    Next::Write(InlineWrite {
        out: std::mem::take(&mut st.unwritten),
        sock,
        copy: st.io.capturing().then(Vec::new),
        written: 0,
        more: produced >= max,
    })
}

impl Connection {
    /// Takes back an [`InlineWrite`] this thread wrote outside the lock: the octets are
    /// recorded and told to the stream (send completions may follow), and what the
    /// socket did not take goes to the driver. Returns true when the driver must run.
    pub(crate) fn inline_written(&mut self, w: InlineWrite) -> bool {
        self.tx_claimed = false;
        // The connection ended meanwhile (its driver finished): nothing is left to account.
        if !self.io.is_open() {
            return false;
        }
        // Nobody put anything here while the write was claimed.
        self.unwritten = w.out;
        self.tx_busy = !self.unwritten.is_empty();
        self.io.wrote(
            &mut self.stream,
            w.written,
            w.copy.as_deref().unwrap_or_default(),
        );
        self.settle_tx(true);
        self.collect();
        // The driver also looks again if the connection is closing or ending: it held back
        // its FIN, and the peer's, for these octets.
        self.tx_busy
            || w.more
            || self.park.is_some()
            || self.rx_eof
            || self.stream.wants_transmit()
            || self.stream.state() != QpState::Rts
    }
}
