//! The driver of one connected queue pair: one tokio task per connection (the quinn
//! `ConnectionDriver` shape). Each turn of its loop processes input, produces output,
//! runs the timers and delivers what the step produced, with the lock held only for the
//! protocol work and released before anything is delivered or awaited. Its reads and
//! writes run outside the lock (see `io`).

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rdmap::Transmit;
use tokio::io::Interest;
use tokio::time::Instant;
use tracing::Instrument;

use super::connection::{ParkRequest, TX_HIGH_WATER, Waits};
use super::fair::{Fairness, watched};
use super::handle::Shared;
use super::io::{Input, Read, Registration, read_unlocked, send_now, write_unlocked};

/// After this side is done (Terminate sent or graceful close drained), how long to wait
/// for the peer's FIN before dropping the connection.
const LINGER: Duration = Duration::from_secs(2);
/// How long a busy poll spins before it offers the CPU to other threads between polls
/// (`sched_yield`, which returns at once on an idle CPU).
const SHARE_CPU_AFTER: Duration = Duration::from_micros(20);
/// tokio's budget of one task poll (`tokio::task::coop`): what a turn that delivered that
/// many completions spends at most.
const COOP_BUDGET: usize = 128;
/// Where the driver's timer rests while it has no deadline.
const FAR: Duration = Duration::from_secs(86_400);

/// Runs the connection until it ends. Octets that arrived together with the MPA
/// handshake and belong to FPDU mode are in `Connection::rx` already (and in the capture).
/// `sock` is the driver's own reference: its reads and writes outside the lock use it,
/// and the connection's [`Io`](super::io::Io) accounts for them.
pub(crate) fn spawn(shared: Arc<Shared>, sock: Arc<TcpStream>) {
    let span = tracing::debug_span!("qp", qp = %shared.num, peer = ?sock.peer_addr().ok());
    tokio::spawn(
        async move {
            let result = run(&shared, &sock).await;
            if let Ok(Some(park)) = result {
                // Parked for a migration: the socket goes to whoever moves the queue
                // pair, and the connection goes on with another driver.
                hand_over(shared, sock, park);
                return;
            }
            // Whatever happened, the stream ends flushed; the socket closes on drop.
            let mut st = shared.lock();
            let (end, tap, tpt) = st.finish(result.as_ref().err());
            shared.unlock(st);
            drop(sock);
            // Type 2 windows bound to this queue pair die with it.
            let released = tpt.release_qp(crate::tpt::QpId::from(shared.num.0));
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

/// The driver parked: `sock` goes to the migration that asked. If that migration was
/// given up meanwhile, the connection goes on with a new driver.
fn hand_over(shared: Arc<Shared>, sock: Arc<TcpStream>, park: ParkRequest) {
    if let Err(sock) = park.0.send(sock) {
        shared.lock().end_migration();
        spawn(shared, sock);
    }
}

/// Drives the connection until it ends (`Ok(None)`) or parks for a migration
/// (`Ok(Some(request))`, see `park`).
async fn run(shared: &Shared, sock: &TcpStream) -> io::Result<Option<ParkRequest>> {
    let capturing = shared.lock().capturing();
    // A spin on a current-thread runtime would hold up every other task of the runtime,
    // the peer's or the servant's that it waits for among them.
    let busy_poll = match tokio::runtime::Handle::current().runtime_flavor() {
        tokio::runtime::RuntimeFlavor::CurrentThread => Duration::ZERO,
        _ => shared.lock().busy_poll(),
    };
    let mut driver = Driver {
        out: Transmit::new(),
        capturing,
        copy: Vec::new(),
        shut_down: false,
        linger_until: None,
        timer: Box::pin(tokio::time::sleep(FAR)),
        reg: Registration::default(),
        busy_poll,
        busy_until: None,
        fresh_input: false,
        delivered: 0,
        progress: Progress {
            moved: 0,
            at: Instant::now(),
        },
    };
    let mut fair = Fairness::default();
    loop {
        // Each completion delivered to the application's queues spends a unit of tokio's
        // budget, so that the application's task (woken onto this thread: the worker's
        // LIFO slot, or a current-thread runtime) drains them before they overrun its
        // queue. The driver does not busy-poll ahead of that task either.
        let delivered = std::mem::take(&mut driver.delivered);
        if delivered > 0 {
            driver.busy_until = None;
            for _ in 0..delivered.min(COOP_BUDGET) {
                let ((), pended) = watched(tokio::task::coop::consume_budget()).await;
                if pended {
                    fair.returned();
                }
            }
        }
        let (waits, now) = match driver.turn(shared) {
            Turn::Park(park) => return Ok(Some(park)),
            Turn::Wait(waits, now) => (waits, now),
        };
        if waits.eof && driver.out.is_empty() && !waits.claimed {
            return Ok(None);
        }
        // A driver that always finds work still lets the worker's other tasks run (by
        // the turn's clock: under paused time it only yields by waiting).
        if fair.must_yield(now.into_std()) {
            tokio::task::yield_now().await;
            fair.returned();
        }
        let (flow, pended) = watched(driver.wait(shared, sock, &waits)).await;
        if pended {
            fair.returned();
        }
        if flow?.is_break() {
            return Ok(None);
        }
    }
}

/// What the driver keeps from one turn to the next.
struct Driver {
    /// Octets the driver must write, in order: what an inline transmit left over first.
    out: Transmit,
    /// The connection is captured: what it writes is copied into `copy` for the capture.
    capturing: bool,
    copy: Vec<u8>,
    /// TCP's sending half is shut down: this side is done.
    shut_down: bool,
    /// When to stop waiting for the peer's FIN once shut down.
    linger_until: Option<Instant>,
    /// Liveness: the socket's octet count at the last turn that saw it change, and when.
    progress: Progress,
    /// The driver's one timer, reset to each turn's earliest deadline rather than made
    /// anew: a new timer made while the runtime's timer wheel is empty (between two
    /// turns) wakes the thread parked in the runtime's poller, once per message.
    timer: Pin<Box<tokio::time::Sleep>>,
    /// The socket registered with the runtime, while the driver waits for it to be
    /// readable or writable; dropped (deregistered) while the application polls the input
    /// and the driver has nothing to write, so that no packet wakes a runtime thread.
    reg: Registration,
    /// How long after input that made output (a response) the driver polls the socket
    /// instead of sleeping (zero: never).
    busy_poll: Duration,
    /// Until when it does.
    busy_until: Option<std::time::Instant>,
    /// Octets arrived since the last turn.
    fresh_input: bool,
    /// Completions delivered to the application's queues since the last turn.
    delivered: usize,
}

/// What a turn decided.
enum Turn {
    /// A migration asked this driver to stop, and it can: hand the connection over.
    Park(ParkRequest),
    /// Wait for one of these, then turn again; the turn's clock reading.
    Wait(Waits, Instant),
}

impl Driver {
    /// One turn under the connection's lock: park if a migration asks and nothing is
    /// half done, else [`Connection::step`](super::connection::Connection::step) on the turn's one
    /// clock reading, and what to wait for next. Delivery happens as the lock is
    /// released.
    fn turn(&mut self, shared: &Shared) -> Turn {
        let mut st = shared.lock();
        if let Some(park) = st.take_park(&mut self.out, self.shut_down) {
            shared.unlock(st);
            return Turn::Park(park);
        }
        let now = st.step(&mut self.out, TX_HIGH_WATER, self.shut_down);
        if st.is_done() && self.out.is_empty() && !self.shut_down {
            self.shut_down = true;
            st.shutdown_write();
            self.linger_until = Some(now + LINGER);
        }
        self.progress.update(st.moved(), now);
        let waits = st.waits(now, self.progress.at, !self.out.is_empty());
        // Busy polling is for the responder's part, which no application thread does:
        // input that made output (a Read or Atomic Response) opens the window. Completions
        // for the application's queues may wake its task, on this worker: give the thread
        // to it rather than spin (a sink, iwarpd's, wakes no task here; see `run`).
        if std::mem::take(&mut self.fresh_input) && !self.out.is_empty() {
            self.busy_until = busy_window(self.busy_poll);
        }
        let delivers = shared.delivers_to_app(&st);
        if delivers > 0 {
            self.delivered += delivers;
            self.busy_until = None;
        }
        shared.unlock(st);
        Turn::Wait(waits, now)
    }

    /// Writes what the driver holds, waits for the socket, a post's wake-up or a timer,
    /// and does the IO it is ready for. `Break` when the connection is over: the linger
    /// after this side's close ran out. A liveness timeout is an error.
    ///
    /// Within the connection's busy-poll window after it last answered the peer
    /// ([`SocketOptions::busy_poll`](crate::SocketOptions::busy_poll)), the driver polls
    /// the socket itself instead of sleeping until the kernel wakes a runtime thread (a
    /// wake-up costs more than the round trip); while the application polls the input,
    /// the driver leaves it alone.
    async fn wait(
        &mut self,
        shared: &Shared,
        sock: &TcpStream,
        w: &Waits,
    ) -> io::Result<ControlFlow<()>> {
        // The socket usually has room: write at once, and wait for it only if it is full.
        // Once all is written, turn again: the stream may have more to produce.
        if !self.out.is_empty() {
            let copy = self.capturing.then_some(&mut self.copy);
            self.delivered += write_out(shared, &mut self.out, copy, |s| send_now(sock, s))?;
            if self.out.is_empty() {
                return Ok(ControlFlow::Continue(()));
            }
        }
        let read = !w.eof && w.muted_until.is_none();
        // The socket is full: sleep until it has room (or input comes), do not spin.
        let write = !self.out.is_empty();
        let spin_until = self
            .busy_until
            .filter(|&until| read && !write && std::time::Instant::now() < until);
        let sleep_read = read && spin_until.is_none();
        // Not registered while the application polls the input and the driver has nothing
        // to write, so that no packet wakes a runtime thread then.
        if !read && !write {
            self.reg.release();
        } else if sleep_read || write {
            self.reg.register(sock)?;
        }
        let timer = [
            w.deadline.map(Instant::from_std),
            self.linger_until,
            w.muted_until,
            w.liveness.map(|(at, _)| at),
        ]
        .into_iter()
        .flatten()
        .min();
        match timer {
            Some(t) if t != self.timer.deadline() => self.timer.as_mut().reset(t),
            // Not left armed at an old deadline (a wake-up for nothing, and with paused
            // time a jump of the clock to it).
            None if self.timer.deadline() < Instant::now() + FAR / 2 => {
                self.timer.as_mut().reset(Instant::now() + FAR);
            }
            _ => {}
        }
        let reg = self.reg.get();
        tokio::select! {
            r = ready(reg, Interest::READABLE), if sleep_read => {
                let reg = r?;
                // `try_io`: a read that finds nothing clears the readiness.
                if read_claimed(shared, |input| {
                    reg.try_io(Interest::READABLE, || read_unlocked(sock, input))
                })? {
                    self.fresh_input = true;
                }
            }
            got = spin(shared, sock, spin_until) => {
                self.fresh_input = got?;
            }
            r = ready(reg, Interest::WRITABLE), if write => {
                let reg = r?;
                let copy = self.capturing.then_some(&mut self.copy);
                self.delivered += write_out(shared, &mut self.out, copy, |s| {
                    reg.try_io(Interest::WRITABLE, || send_now(sock, s))
                })?;
            }
            () = shared.wake.notified() => {}
            () = &mut self.timer, if timer.is_some() => {
                let now = Instant::now();
                if self.linger_until.is_some_and(|l| now >= l) {
                    return Ok(ControlFlow::Break(()));
                }
                let mut st = shared.lock();
                // The deadline came from the last turn's state; an application that polls
                // its input may have moved octets since, or a post may be writing outside
                // the lock, and then it has not expired.
                if let Some((at, why)) = w.liveness
                    && now >= at
                    && st.stalled_since(self.progress.moved)
                {
                    st.timed_out();
                    shared.unlock(st);
                    tracing::info!(?why, "connection timed out: nothing moved; ending it");
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "liveness timeout"));
                }
                st.handle_timeout(now);
                self.delivered += shared.delivers_to_app(&st);
                shared.unlock(st);
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Writes as much of `out` as `write` (one vectored write of the socket) takes, with the
/// lock released (the driver alone writes while it holds octets, `tx_busy`), copying it
/// into `copy` for the capture, and accounts for it under the lock. Returns how many
/// completions that delivered to the application's queues.
fn write_out(
    shared: &Shared,
    out: &mut Transmit,
    mut copy: Option<&mut Vec<u8>>,
    write: impl FnMut(&[IoSlice<'_>]) -> io::Result<usize>,
) -> io::Result<usize> {
    if let Some(copy) = copy.as_mut() {
        copy.clear();
    }
    let n = write_unlocked(write, out, copy.as_deref_mut())?;
    let mut st = shared.lock();
    st.wrote(n, copy.map_or(&[][..], |c| &c[..]), out);
    let delivers = shared.delivers_to_app(&st);
    shared.unlock(st);
    Ok(delivers)
}

/// The end of a busy-poll window of `busy_poll` that opens now (`None` for zero).
fn busy_window(busy_poll: Duration) -> Option<std::time::Instant> {
    (!busy_poll.is_zero()).then(|| std::time::Instant::now() + busy_poll)
}

/// Claims the input, reads it with `read` outside the lock and hands it back: true if
/// octets (or the FIN) arrived. Nothing happens if someone else holds the input.
fn read_claimed(
    shared: &Shared,
    read: impl FnOnce(&mut Input) -> io::Result<usize>,
) -> io::Result<bool> {
    let claimed = shared.lock().claim_input();
    let Some(mut input) = claimed else {
        return Ok(false);
    };
    let got = read(&mut input);
    let got = shared.lock().return_input(input, got)?;
    Ok(got != Read::Nothing)
}

/// Polls `sock` until octets arrive, the driver is woken (a post, a close, a migration:
/// [`Shared::wake_driver`]), or `until` passes: true if something arrived. It spins on
/// the worker thread without yielding to the runtime: a yield puts the task back on the
/// run queue, and tokio then wakes an idle worker to steal it, one thread wake-up per
/// poll (the driver's loop yields by time instead, see `fair`). After [`SHARE_CPU_AFTER`] it
/// offers the CPU to other threads between polls. The window is short and real time
/// (tokio's paused time cannot stall it). Never completes without `until`.
async fn spin(
    shared: &Shared,
    sock: &TcpStream,
    until: Option<std::time::Instant>,
) -> io::Result<bool> {
    let Some(until) = until else {
        return std::future::pending().await;
    };
    let share_after = std::time::Instant::now() + SHARE_CPU_AFTER;
    let wakes = shared.wakes();
    loop {
        let claimed = shared.lock().claim_input();
        let Some(mut input) = claimed else {
            return Ok(false);
        };
        let got = read_unlocked(sock, &mut input);
        let mut st = shared.lock();
        match st.return_input(input, got)? {
            Read::Nothing => {}
            Read::Data(_) => {
                st.count_busy_polled();
                return Ok(true);
            }
            Read::Eof => return Ok(true),
        }
        drop(st);
        let now = std::time::Instant::now();
        if now >= until || shared.wakes() != wakes {
            return Ok(false);
        }
        if now >= share_after {
            // The peer may share this CPU (both ends pinned to one): let it run.
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// When the connection's octet count last changed, as the driver saw it.
struct Progress {
    moved: u64,
    at: Instant,
}

impl Progress {
    /// The count is `moved` at `now`: a change is progress.
    fn update(&mut self, moved: u64, now: Instant) {
        if moved != self.moved {
            self.moved = moved;
            self.at = now;
        }
    }
}

/// Waits until the registered socket `reg` is ready for `interest` (never, unregistered),
/// and returns it.
async fn ready(
    reg: Option<&tokio::net::TcpStream>,
    interest: Interest,
) -> io::Result<&tokio::net::TcpStream> {
    match reg {
        Some(reg) => reg.ready(interest).await.map(|_| reg),
        None => std::future::pending().await,
    }
}
