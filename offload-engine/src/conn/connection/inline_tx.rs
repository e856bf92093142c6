//! Inline transmit (the low-latency doorbell): a post writes the FPDUs it produced
//! straight to the socket on the caller's thread, instead of waking the
//! connection's driver task to do it. That saves a task wake-up (and often a cross-thread
//! futex wake) on every message, which is most of a small message's cost.
//!
//! Ordering on the wire is kept by one rule, checked under the connection's lock: the
//! caller writes only when the driver holds nothing unwritten (`Connection::tx_busy` is false).
//! What the socket does not take is left in `Connection::unwritten` with `tx_busy` set, and the
//! driver sends it before anything else.

use rdmap::QpState;

use super::Connection;

/// The largest payload a post sends on the caller's thread. Small messages are where the
/// saved wake-up matters; large ones go faster through the driver, which keeps the
/// sender's CRC and copies off the application's thread (measured: 64 KiB Writes with
/// CRC sent inline ran at half the rate).
pub(crate) const INLINE_MAX_PAYLOAD: u32 = 16 * 1024;

/// Octets queued for the socket before the driver stops asking the stream for more.
pub(crate) const TX_HIGH_WATER: usize = 256 * 1024;

/// The most one inline transmit produces and writes on the caller's thread; the driver does the rest.
pub(crate) const INLINE_MAX: usize = 64 * 1024;

/// Queues `wr` on the send queue, and writes it on this thread if it is small and the
/// queue was idle (the inline doorbell); otherwise the driver sends it. Returns true when
/// the driver must run.
pub(crate) fn post_queued(
    st: &mut Connection,
    wr: rdmap::SendWr,
) -> Result<bool, rdmap::PostError> {
    // A Delay starts on the driver's clock: the driver must run, never the inline path.
    let delay = matches!(wr.op, rdmap::SendOp::Delay { .. });
    let inline =
        !delay && wr.op.payload_len() <= INLINE_MAX_PAYLOAD && st.stream.outstanding_sends() == 0;
    st.stream.post_send(wr)?;
    Ok(if inline {
        transmit(st, INLINE_MAX)
    } else {
        true
    })
}

/// Sends up to `max` octets of what the stream has to send now, if the driver is idle.
/// Returns true when the driver must run (it has a backlog, the socket was full, more is
/// left to send, or the state is not RTS).
pub(crate) fn transmit(st: &mut Connection, max: usize) -> bool {
    if st.tx_busy || st.migrating || !st.io.is_open() || st.stream.state() != QpState::Rts {
        return true;
    }
    if !st.tx_gate() {
        return true;
    }
    let produced = st
        .stream
        .poll_transmit(st.mem.as_mut(), &mut st.unwritten, max);
    if produced == 0 {
        return false;
    }
    while !st.unwritten.is_empty() {
        match st.io.write(&mut st.stream, &mut st.unwritten) {
            Ok(0) => break,
            Ok(_) => {}
            // The driver's own write meets the error again and ends the connection.
            Err(_) => break,
        }
    }
    st.tx_busy = !st.unwritten.is_empty();
    st.settle_tx(true);
    // Stopping at `max` may have left more to send: the driver carries on.
    st.tx_busy || produced >= max
}
