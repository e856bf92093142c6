//! The inline push path (seed 000's low-latency doorbell): a post writes the FPDUs it
//! produced straight to the socket on the caller's thread, instead of waking the
//! connection's driver task to do it. That saves a task wake-up (and often a cross-thread
//! futex wake) on every message, which is most of a small message's cost.
//!
//! Ordering on the wire is kept by one rule, checked under the core lock: the caller
//! writes only when the driver holds nothing unwritten (`Core::tx_busy` is false). What
//! the socket does not take is left in `Core::pushed` with `tx_busy` set, and the driver
//! sends it before anything else.

use std::io::{self, IoSlice};

use bytes::Buf as _;
use rdmap::{QpState, Stream, Transmit};
use tokio::net::TcpStream;

use crate::pcap::Tap;
use crate::qp::Core;

/// The largest payload a post sends on the caller's thread. Small messages are where the
/// saved wake-up matters; large ones go faster through the driver, which keeps the
/// sender's CRC and copies off the application's thread (measured: 64 KiB Writes with
/// CRC pushed inline ran at half the rate).
pub(crate) const PUSH_MAX_PAYLOAD: u32 = 16 * 1024;

/// The most one push produces and writes on the caller's thread; the driver does the rest.
pub(crate) const PUSH_MAX: usize = 64 * 1024;

/// Sends what the stream has to send now, if the driver is idle. Returns true when the
/// driver must run (it has a backlog, the socket was full, more is left to send, or the
/// state is not RTS).
pub(crate) fn push(core: &mut Core) -> bool {
    let Core {
        stream,
        mem,
        tap,
        sock,
        tx_busy,
        pushed,
        ..
    } = core;
    let Some(sock) = sock.as_deref() else {
        return true;
    };
    if *tx_busy || stream.state() != QpState::Rts {
        return true;
    }
    let produced = stream.poll_transmit(mem.as_mut(), pushed, PUSH_MAX);
    if produced == 0 {
        return false;
    }
    while !pushed.is_empty() {
        match try_write(sock, pushed) {
            Ok(0) => break,
            Ok(n) => written(stream, tap, pushed, n),
            // The driver's own write meets the error again and ends the connection.
            Err(_) => break,
        }
    }
    *tx_busy = !pushed.is_empty();
    // Stopping at PUSH_MAX may have left more to send: the driver carries on.
    *tx_busy || produced >= PUSH_MAX
}

/// One vectored, non-blocking write of the front of `out`. `Ok(0)` when the socket is
/// full (the readiness is then cleared, so the driver's `writable()` waits for room).
pub(crate) fn try_write(sock: &TcpStream, out: &Transmit) -> io::Result<usize> {
    let mut slices = [IoSlice::new(&[]); 64];
    let n = out.chunks_vectored(&mut slices);
    match sock.try_write_vectored(&slices[..n]) {
        Ok(w) => Ok(w),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Bookkeeping after the first `n` octets of `out` were written: capture them, drop them,
/// and tell the stream (send completions may follow).
pub(crate) fn written(stream: &mut Stream, tap: &mut Tap, out: &mut Transmit, n: usize) {
    let mut slices = [IoSlice::new(&[]); 64];
    let cnt = out.chunks_vectored(&mut slices);
    let mut left = n;
    for s in &slices[..cnt] {
        if left == 0 {
            break;
        }
        let take = left.min(s.len());
        tap.sent(s.get(..take).unwrap_or_default());
        left -= take;
    }
    out.advance(n);
    stream.handle_written(n);
}
