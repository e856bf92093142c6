//! The IO driver of one connected queue pair: socket bytes in, FPDUs out, timers, and
//! completions to the CQs. One tokio task per connection (the quinn `ConnectionDriver`
//! shape): it locks the shared core only between awaits.

use std::io::{self, IoSlice};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rdmap::{QpState, Transmit};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::Instrument;

use crate::pcap::Tap;
use crate::qp::Shared;

/// Octets queued for the socket before the driver stops asking the stream for more.
const TX_HIGH_WATER: usize = 256 * 1024;
/// Read buffer growth step.
const RX_CHUNK: usize = 64 * 1024;
/// After this side is done (Terminate sent or graceful close drained), how long to wait
/// for the peer's FIN before dropping the connection.
const LINGER: Duration = Duration::from_secs(2);

/// Runs the connection until it ends. `leftover` holds octets that arrived together with
/// the MPA handshake and belong to FPDU mode (`tap` has recorded them already).
pub(crate) fn spawn(shared: Arc<Shared>, sock: TcpStream, leftover: BytesMut, mut tap: Tap) {
    let span = tracing::debug_span!("qp", qp = %shared.num, peer = ?sock.peer_addr().ok());
    tokio::spawn(
        async move {
            let result = run(&shared, &sock, leftover, &mut tap).await;
            // Whatever happened, the stream ends flushed; the socket closes on drop.
            let mut core = shared.lock();
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection failed");
                core.end.get_or_insert(crate::QpEnd::ConnectionLost);
            }
            if !matches!(core.stream.state(), QpState::Error | QpState::Idle) {
                core.stream.handle_eof(&mut BytesMut::new());
            }
            shared.dispatch(&mut core);
            let end = core.end.unwrap_or(crate::QpEnd::ConnectionLost);
            drop(core);
            // Type 2 windows bound to this queue pair die with it.
            let released = shared.tpt.release_qp(crate::tpt::QpId::from(shared.num.0));
            if released > 0 {
                tracing::debug!(released, "unbound type 2 windows");
            }
            // The capture ends (FIN, last ACKs, flushed) before anyone learns of the end.
            drop(tap);
            shared.ended.send_replace(Some(end));
        }
        .instrument(span),
    );
}

async fn run(shared: &Shared, sock: &TcpStream, mut rx: BytesMut, tap: &mut Tap) -> io::Result<()> {
    let mut out = Transmit::new();
    let mut eof = false;
    let mut shut_down = false;
    let mut linger_until: Option<Instant> = None;
    loop {
        // Protocol work under the lock: input, output, events.
        let (deadline, done) = {
            let mut core = shared.lock();
            let core = &mut *core;
            if !rx.is_empty() {
                core.stream.handle_input(&mut rx, core.mem.as_mut());
            }
            if eof {
                core.stream.handle_eof(&mut rx);
            }
            if out.len() < TX_HIGH_WATER {
                let _ = core
                    .stream
                    .poll_transmit(core.mem.as_mut(), &mut out, TX_HIGH_WATER);
            }
            shared.dispatch(core);
            let done = match core.stream.state() {
                QpState::Error | QpState::Idle => true,
                QpState::Closing => core.stream.is_drained(),
                _ => false,
            };
            (core.stream.poll_timeout(), done)
        };
        if eof && out.is_empty() {
            return Ok(());
        }
        if shut_down && !out.is_empty() {
            // Nothing can be sent after TCP's sending half is shut down.
            tracing::debug!(octets = out.len(), "output after close discarded");
            out.advance(out.len());
        }
        if done && out.is_empty() && !shut_down {
            shut_down = true;
            shutdown_write(sock);
            tap.sent_fin();
            linger_until = Some(Instant::now() + LINGER);
        }
        let timer = match (deadline, linger_until) {
            (Some(d), Some(l)) => Some(Instant::from_std(d).min(l)),
            (Some(d), None) => Some(Instant::from_std(d)),
            (None, l) => l,
        };
        tokio::select! {
            r = sock.readable(), if !eof => {
                r?;
                rx.reserve(RX_CHUNK);
                match sock.try_read_buf(&mut rx) {
                    Ok(0) => {
                        eof = true;
                        tap.received_fin();
                    }
                    Ok(n) => tap.received(rx.get(rx.len() - n..).unwrap_or_default()),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            w = sock.writable(), if !out.is_empty() => {
                w?;
                let mut slices = [IoSlice::new(&[]); 64];
                let n = out.chunks_vectored(&mut slices);
                match sock.try_write_vectored(&slices[..n]) {
                    Ok(written) => {
                        record_written(tap, &slices[..n], written);
                        out.advance(written);
                        let mut core = shared.lock();
                        core.stream.handle_written(written);
                        shared.dispatch(&mut core);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
            () = shared.wake.notified() => {}
            () = sleep_until(timer) => {
                let now = Instant::now();
                if linger_until.is_some_and(|l| now >= l) {
                    return Ok(());
                }
                let mut core = shared.lock();
                core.stream.handle_timeout(now.into_std());
                shared.dispatch(&mut core);
            }
        }
    }
}

/// Records the first `written` octets of `slices` in the capture.
fn record_written(tap: &mut Tap, slices: &[IoSlice<'_>], mut written: usize) {
    for s in slices {
        if written == 0 {
            break;
        }
        let take = written.min(s.len());
        tap.sent(s.get(..take).unwrap_or_default());
        written -= take;
    }
}

async fn sleep_until(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

fn shutdown_write(sock: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(sock).shutdown(std::net::Shutdown::Write) {
        tracing::debug!(error = %e, "shutdown");
    }
}
