//! The IO driver of one connected queue pair: socket bytes in, FPDUs out, timers, and
//! completions to the CQs. One tokio task per connection (the quinn `ConnectionDriver`
//! shape): it locks the shared core only between awaits.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use rdmap::{QpState, Transmit};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tracing::Instrument;

use crate::push;
use crate::qp::{Core, Shared};

/// Octets queued for the socket before the driver stops asking the stream for more.
const TX_HIGH_WATER: usize = 256 * 1024;
/// The room a read gets. The buffer stays small, and so in the cache: a partial FPDU
/// left at the end of a read is moved to the front to make room (a larger buffer that
/// moved it less often measured slower).
const RX_CHUNK: usize = 64 * 1024;
/// How long after the application's last [`Qp::poll_input`](crate::Qp::poll_input) the
/// driver leaves reading to it. If it stops polling, the driver reads again after this.
const POLL_MUTE: Duration = Duration::from_millis(1);
/// After this side is done (Terminate sent or graceful close drained), how long to wait
/// for the peer's FIN before dropping the connection.
const LINGER: Duration = Duration::from_secs(2);

/// Runs the connection until it ends. Octets that arrived together with the MPA
/// handshake and belong to FPDU mode are in `Core::rx` already (and in the capture).
pub(crate) fn spawn(shared: Arc<Shared>, sock: Arc<TcpStream>) {
    let span = tracing::debug_span!("qp", qp = %shared.num, peer = ?sock.peer_addr().ok());
    tokio::spawn(
        async move {
            let result = run(&shared, &sock).await;
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
            let tap = std::mem::take(&mut core.tap);
            core.sock = None;
            drop(core);
            drop(sock);
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

async fn run(shared: &Shared, sock: &TcpStream) -> io::Result<()> {
    // Octets the driver must write, in order: what a post's push left over first.
    let mut out = Transmit::new();
    let mut shut_down = false;
    let mut linger_until: Option<Instant> = None;
    loop {
        // Protocol work under the lock: input, output, events.
        let (deadline, eof, muted_until) = {
            let mut core = shared.lock();
            let core = &mut *core;
            if !core.rx.is_empty() {
                core.stream.handle_input(&mut core.rx, core.mem.as_mut());
            }
            if core.rx_eof {
                core.stream.handle_eof(&mut core.rx);
            }
            if out.is_empty() && !core.pushed.is_empty() {
                std::mem::swap(&mut out, &mut core.pushed);
            }
            if out.len() < TX_HIGH_WATER {
                let _ = core
                    .stream
                    .poll_transmit(core.mem.as_mut(), &mut out, TX_HIGH_WATER);
            }
            if shut_down && !out.is_empty() {
                // Nothing can be sent after TCP's sending half is shut down.
                tracing::debug!(octets = out.len(), "output after close discarded");
                out.advance(out.len());
            }
            core.tx_busy = !out.is_empty();
            shared.dispatch(core);
            let done = match core.stream.state() {
                QpState::Error | QpState::Idle => true,
                QpState::Closing => core.stream.is_drained(),
                _ => false,
            };
            if done && out.is_empty() && !shut_down {
                shut_down = true;
                shutdown_write(sock);
                core.tap.sent_fin();
                linger_until = Some(Instant::now() + LINGER);
            }
            // While the application polls the input itself, the driver does not wait
            // for readability: every message would wake it only to find the input taken.
            let muted_until = core
                .polled_at
                .map(|t| Instant::from_std(t + POLL_MUTE))
                .filter(|&u| u > Instant::now());
            (core.stream.poll_timeout(), core.rx_eof, muted_until)
        };
        if eof && out.is_empty() {
            return Ok(());
        }
        let timer = [deadline.map(Instant::from_std), linger_until, muted_until]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            r = sock.readable(), if !eof && muted_until.is_none() => {
                r?;
                read_input(sock, &mut shared.lock())?;
            }
            w = sock.writable(), if !out.is_empty() => {
                w?;
                let n = push::try_write(sock, &out)?;
                if n > 0 {
                    let mut core = shared.lock();
                    let core = &mut *core;
                    push::written(&mut core.stream, &mut core.tap, &mut out, n);
                    core.tx_busy = !out.is_empty();
                    shared.dispatch(core);
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

/// One non-blocking read from `sock` into `core.rx` (the driver's read). Returns the
/// octets read: 0 when nothing was there or at the peer's FIN (then `core.rx_eof`).
fn read_input(sock: &TcpStream, core: &mut Core) -> io::Result<usize> {
    core.rx.reserve(RX_CHUNK);
    match sock.try_read_buf(&mut core.rx) {
        Ok(n) => {
            input_read(core, n);
            Ok(n)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
        Err(e) => Err(e),
    }
}

/// Bookkeeping after a read appended `n` octets to `core.rx` (0: the peer's FIN): the
/// capture, and the end of input. The driver and
/// [`Qp::poll_input`](crate::Qp::poll_input) both read under the core lock and come
/// here, so the capture and the stream see the octets in order.
pub(crate) fn input_read(core: &mut Core, n: usize) {
    if n == 0 {
        core.rx_eof = true;
        core.tap.received_fin();
    } else {
        let fresh = core.rx.len() - n;
        core.tap.received(core.rx.get(fresh..).unwrap_or_default());
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
