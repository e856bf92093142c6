//! The latency tests' measured loops, as perftest's `run_iter_lat_write`,
//! `run_iter_lat` and `run_iter_lat_send` run them. Each returns the intervals between
//! its consecutive posts, the samples (an operation that did not complete is not one).
//!
//! From captures of perftest 6.06 on siw: in `write_lat` the server writes first and
//! each side waits for the peer's Write numbered like its next one before writing
//! again; in `send_lat` the client sends first; in `read_lat` only the client works.

use std::time::{Duration, Instant};

use verbs::{Cq, Mr, Payload, Qp, QpState, RemoteBuf, SendFlags, SendOp, SendWr, Wc, WcStatus};

use super::bw::atomic_op;
use super::opts::{ATOMIC_SIZE, AtomicOp};
use super::progress::{Goal, Progress};
use super::send::Inbox;
use super::stats::Intervals;
use super::{Error, step};

/// How many polls of the buffer between two clock reads.
const POLLS_PER_CLOCK: u32 = 16;
/// How many clock reads between two yields to the runtime.
const CLOCKS_PER_YIELD: u32 = 4;
/// How long a wait spins before it also offers the CPU to other threads at each clock
/// read (`sched_yield`): longer than a round trip, so that an idle machine never yields;
/// a peer that shares the CPU (both ends pinned to one) then runs within a poll interval
/// instead of after the scheduler's time slice (4 ms a round trip).
const SHARE_CPU_AFTER: Duration = Duration::from_micros(20);

/// One measured run: `size` octets, `iters` iterations or until the deadline.
#[derive(Debug)]
pub struct Run {
    /// Message size.
    pub size: usize,
    /// Iterations (ignored with a deadline).
    pub iters: u64,
    /// How long to run and to wait.
    pub lim: Limits,
    /// The progress line.
    pub progress: Progress,
    /// `--imm`: Sends carry Immediate Data (the extension's Send with Immediate Data).
    pub imm: bool,
}

/// How a run waits: its deadline, the longest wait for the peer, and how.
#[derive(Copy, Clone, Debug)]
pub struct Limits {
    /// `-D`: when to stop.
    pub deadline: Option<Instant>,
    /// The longest wait for the peer.
    pub timeout: Duration,
    /// `-e`: sleep until completions arrive instead of polling busily.
    pub events: bool,
}

impl Run {
    /// A run of `size` for `opts` (`-D` starts counting now).
    pub fn new(opts: &super::Opts, size: usize) -> Self {
        let goal = opts.duration.map_or(Goal::Iters(opts.iters), Goal::Time);
        Self {
            size,
            iters: opts.iters,
            lim: Limits {
                deadline: opts.duration.map(|d| Instant::now() + d),
                timeout: opts.timeout,
                events: opts.events,
            },
            progress: Progress::new(format!("{} {size}", opts.test.name()), goal),
            imm: opts.imm,
        }
    }

    /// Whether another message is due after `done` (none once Ctrl-C ended the run).
    fn more(&self, done: u64) -> bool {
        if super::interrupted() {
            return false;
        }
        match self.lim.deadline {
            Some(d) => Instant::now() < d,
            None => done < self.iters,
        }
    }
}

impl Limits {
    fn timed_out(&self, what: &str, n: u64) -> Error {
        let why = if n > 1 {
            "the peer stopped sending, or the network between stopped carrying it (the \
             connection is still up)"
        } else {
            "is the peer running the same test with the same -s/-n/-a flags?"
        };
        format!("{what} {n} did not arrive within {:?}: {why}", self.timeout).into()
    }

    /// The error for a wait the connection's end cut short.
    fn ended(&self, what: &str, n: u64) -> Error {
        format!("{what} {n} cannot arrive: the connection closed").into()
    }
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `write_lat`: RDMA Write ping-pong. `buf` holds our outgoing message at offset 0
/// and, at `inbox`, the area the peer writes into; `dst` is the peer's area. The last
/// octet of each message carries its number (mod 256). `first`: we write first (the
/// server does).
pub async fn write(
    run: &mut Run,
    qp: &Qp,
    buf: &Mr,
    inbox: usize,
    dst: RemoteBuf,
    first: bool,
) -> Result<Intervals, Error> {
    let size = run.size;
    let len = u32::try_from(size).map_err(|_| "size too large")?;
    let dst = RemoteBuf { len, ..dst };
    let poll_at = inbox + size - 1;
    let lim = run.lim;
    let wait = |seen: u64| poll_octet(lim, qp, buf, poll_at, seen as u8);
    let send = |sent: u64| async move {
        buf.write(size - 1, &[sent as u8])?;
        let op = SendOp::Write {
            data: Payload::Sgl([buf.local(..size)].into()),
            dst,
        };
        let res = step(
            lim.timeout,
            "an RDMA Write completion",
            qp.exec(op, SendFlags::NONE),
        )
        .await?;
        match res {
            Ok(_) => Ok(true),
            Err(_) if peer_ended(lim, qp) => Ok(false),
            Err(e) => Err(failed(qp, &format!("RDMA Write {sent}: {e}")).await),
        }
    };
    ping_pong(run, first, wait, send).await
}

/// The ping-pong of `write_lat` and `send_lat`: unless it is our turn first, `wait` for
/// the peer's message numbered like our next one (`Ok(false)`: the deadline passed),
/// then `send` ours (`Ok(false)`: the peer ended a timed run first); until the
/// iterations or the deadline run out. Returns the intervals between our posts.
async fn ping_pong<W, S>(
    run: &mut Run,
    first: bool,
    mut wait: impl FnMut(u64) -> W,
    mut send: impl FnMut(u64) -> S,
) -> Result<Intervals, Error>
where
    W: Future<Output = Result<bool, Error>>,
    S: Future<Output = Result<bool, Error>>,
{
    let started = Instant::now();
    let mut posted = Intervals::new();
    let (mut sent, mut seen) = (0u64, 0u64);
    loop {
        let timed = run.lim.deadline.is_some();
        if !timed && sent >= run.iters && seen >= run.iters {
            break;
        }
        if !(first && sent == 0) && (timed || seen < run.iters) {
            seen += 1;
            if !wait(seen).await? {
                break;
            }
        }
        if !run.more(sent) {
            if timed || super::interrupted() {
                break;
            }
            continue;
        }
        let at = nanos(started);
        sent += 1;
        if !send(sent).await? {
            break;
        }
        posted.post(at);
        run.progress.tick(sent);
    }
    run.progress.finish();
    Ok(posted)
}

/// In a timed (`-D`) run the peer stops at its own deadline and closes: a queue pair no
/// longer in RTS then means the run is over, not that it failed.
fn peer_ended(lim: Limits, qp: &Qp) -> bool {
    lim.deadline.is_some() && qp.state() != QpState::Rts
}

/// The error for a failed operation, with why the QP closed if it did.
async fn failed(qp: &Qp, what: &str) -> Error {
    match tokio::time::timeout(Duration::from_millis(500), qp.closed()).await {
        Ok(end) => format!("{what}; the connection ended: {end}").into(),
        Err(_) => what.to_owned().into(),
    }
}

/// Waits until octet `at` of `buf` is `want`, processing `qp`'s input as it polls.
/// `Ok(false)` if the run's deadline passed first.
async fn poll_octet(lim: Limits, qp: &Qp, buf: &Mr, at: usize, want: u8) -> Result<bool, Error> {
    let mut octet = [0u8];
    let seen = spin(lim, qp, "the peer's RDMA Write", u64::from(want), || {
        qp.poll_input();
        buf.read_into(at, &mut octet)?;
        Ok((octet[0] == want).then_some(()))
    })
    .await?;
    Ok(seen.is_some())
}

/// The next completion on `cq`, polled busily as perftest does (processing `qp`'s input
/// on this thread as it polls), or with `-e` waited for. `Ok(None)` if the run's
/// deadline passed first.
async fn completion(
    lim: Limits,
    qp: &Qp,
    cq: &Cq,
    what: &str,
    n: u64,
) -> Result<Option<Wc>, Error> {
    if !lim.events {
        let mut got = Vec::with_capacity(1);
        return spin(lim, qp, what, n, || {
            qp.poll_input();
            cq.poll(&mut got, 1)?;
            Ok(got.pop())
        })
        .await;
    }
    let limit = Instant::now() + lim.timeout;
    let limit = lim.deadline.map_or(limit, |d| d.min(limit));
    tokio::select! {
        got = tokio::time::timeout_at(limit.into(), cq.next()) => match got {
            Ok(wc) => Ok(Some(wc?)),
            Err(_) if lim.deadline.is_some_and(|d| Instant::now() >= d) => Ok(None),
            Err(_) => Err(lim.timed_out(what, n)),
        },
        // Ctrl-C: the run ends with what it measured.
        () = super::interrupt::wait() => Ok(None),
    }
}

/// Polls `ready` until it yields, the way perftest waits: busily, reading the clock every
/// [`POLLS_PER_CLOCK`] polls, yielding to the runtime (the connection's own tasks share
/// it) every [`CLOCKS_PER_YIELD`] clock reads, and offering the CPU to other threads at
/// each clock read once it has spun [`SHARE_CPU_AFTER`]. (Yielding to the runtime on every poll made a multi-threaded
/// runtime wake its other worker each time: through iwarpd, ten thread switches per
/// message.)
/// `Ok(None)` if the run's deadline passed first or Ctrl-C ended it; an error after the
/// run's timeout (`what` number `n` never came), or once `qp` left RTS (the peer closed
/// it) in a run without a deadline.
async fn spin<T>(
    lim: Limits,
    qp: &Qp,
    what: &str,
    n: u64,
    mut ready: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<Option<T>, Error> {
    let start = Instant::now();
    let limit = start + lim.timeout;
    let mut polls = 0u32;
    loop {
        if let Some(v) = ready()? {
            return Ok(Some(v));
        }
        polls += 1;
        if polls.is_multiple_of(POLLS_PER_CLOCK) {
            let now = Instant::now();
            if now - start >= SHARE_CPU_AFTER {
                std::thread::yield_now();
            }
            if lim.deadline.is_some_and(|d| now >= d) || super::interrupted() {
                return Ok(None);
            }
            if qp.state() != QpState::Rts {
                // A timed run's peer stops at its deadline and closes: the run is over.
                return match lim.deadline {
                    Some(_) => Ok(None),
                    None => Err(lim.ended(what, n)),
                };
            }
            if now >= limit {
                return Err(lim.timed_out(what, n));
            }
            if polls.is_multiple_of(POLLS_PER_CLOCK * CLOCKS_PER_YIELD) {
                tokio::task::yield_now().await;
            }
        }
    }
}

/// `read_lat` (client): one signaled RDMA Read of `src` into `buf` at a time, its
/// completion taken from `cq`.
pub async fn read(
    run: &mut Run,
    qp: &Qp,
    cq: &Cq,
    buf: &Mr,
    src: RemoteBuf,
) -> Result<Intervals, Error> {
    let len = u32::try_from(run.size).map_err(|_| "size too large")?;
    let src = RemoteBuf { len, ..src };
    let dst = buf.local(..run.size);
    one_at_a_time(run, qp, cq, "RDMA Read", || SendOp::Read { src, dst }).await
}

/// `atomic_lat` (client): the Atomic `op` on the peer's first 8 octets, one at a time,
/// each timed from post to completion; the original values land in `buf`.
pub async fn atomic(
    run: &mut Run,
    qp: &Qp,
    cq: &Cq,
    buf: &Mr,
    (op, dst): (AtomicOp, RemoteBuf),
) -> Result<Intervals, Error> {
    let dst = RemoteBuf {
        len: ATOMIC_SIZE as u32,
        ..dst
    };
    let result = buf.local(..ATOMIC_SIZE);
    one_at_a_time(run, qp, cq, "Atomic", || atomic_op(op, dst, result)).await
}

/// Runs the operations `make` makes one at a time, each waited for (`what` names them
/// in errors); returns the intervals between the posts.
async fn one_at_a_time(
    run: &mut Run,
    qp: &Qp,
    cq: &Cq,
    what: &str,
    make: impl Fn() -> SendOp,
) -> Result<Intervals, Error> {
    let started = Instant::now();
    let mut posted = Intervals::new();
    let mut done = 0u64;
    let waiting = format!("an {what} completion");
    while run.more(done) {
        let at = nanos(started);
        qp.post_send(SendWr {
            wr_id: done,
            op: make(),
            flags: SendFlags::SIGNALED,
        })?;
        let Some(wc) = completion(run.lim, qp, cq, &waiting, done + 1).await? else {
            break;
        };
        if wc.wc.status != WcStatus::Success {
            let what = format!("{what} {} completed with {:?}", done + 1, wc.wc.status);
            return Err(failed(qp, &what).await);
        }
        posted.post(at);
        done += 1;
        run.progress.tick(done);
    }
    run.progress.finish();
    Ok(posted)
}

/// `send_lat`: Send ping-pong. The receives of `inbox` are pre-posted and reposted
/// as they complete on `cq`; we send from `buf`. `first`: we send first (the client
/// does).
pub async fn send(
    run: &mut Run,
    qp: &Qp,
    cq: &Cq,
    inbox: &Inbox,
    buf: &Mr,
    first: bool,
) -> Result<Intervals, Error> {
    let size = run.size;
    let lim = run.lim;
    // Negotiated: Session::client and Session::server refuse --imm without it.
    let imm = run.imm;
    let wait = |seen: u64| async move {
        let Some(wc) = completion(lim, qp, cq, "the peer's Send", seen).await? else {
            return Ok(false);
        };
        if wc.wc.status != WcStatus::Success {
            return Err(format!("receive {seen} completed with {:?}", wc.wc.status).into());
        }
        qp.post_recv(inbox.wr(wc.wc.wr_id))?;
        Ok(true)
    };
    // Unsignaled, as perftest posts it: the peer's answer says it arrived.
    let send = |sent: u64| async move {
        let posted = qp.post_send(SendWr {
            wr_id: sent,
            op: SendOp::Send {
                data: Payload::Sgl([buf.local(..size)].into()),
                invalidate: None,
                immediate: imm.then_some(sent as u32),
            },
            flags: SendFlags::NONE,
        });
        match posted {
            Ok(()) => Ok(true),
            Err(_) if peer_ended(lim, qp) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    ping_pong(run, first, wait, send).await
}
