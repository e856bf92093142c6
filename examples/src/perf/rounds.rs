//! One size's run of a bandwidth test on every link, as the one-way client and server
//! and the bidirectional tests (`duplex`) all run it: the Writes, Reads or Sends posted
//! (`rdma_round`, `send_round`), the receives taken (`receive_round`), and their buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;
use tokio::task::JoinSet;
use verbs::Mr;

use super::bw::{self, Limits};
use super::msg::{BwReport, Dest};
use super::opts::INFINITE_INTERVAL;
use super::progress::{Goal, Progress};
use super::report::{self, Outcome, Printer, Timeline};
use super::send::{self, Inbox, Until};
use super::session::{Session, remote};
use super::{CREDIT_VA, Error, Opts};

/// How long the server waits for the client to finish its test.
pub(crate) const TEST_WAIT: Duration = Duration::from_secs(3600);

/// The limits of one size's run on each QP.
fn limits(opts: &Opts) -> Limits {
    let epoch = Instant::now();
    Limits {
        depth: opts.tx_depth,
        iters: opts.iters,
        deadline: opts.duration.map(|d| epoch + d),
        timeout: opts.timeout,
        epoch,
    }
}

/// The progress line of link `i` of `links`: on link 0 only, which runs as they all
/// do (its live bandwidth counts them all), and not with `--run_infinitely` (its lines
/// come every interval).
fn progress(opts: &Opts, size: usize, i: usize, links: usize) -> Option<Progress> {
    if i > 0 || opts.infinitely {
        return None;
    }
    let goal = opts.duration.map_or(Goal::Iters(opts.iters), Goal::Time);
    let prog = Progress::new(format!("{} {size}", opts.test.name()), goal);
    Some(prog.with_size((size * links.max(1)) as u64))
}

/// The iterations a bandwidth line reports, as perftest counts them: the operations of
/// every QP together (`-n` times `-q`; with `-D`, all that completed).
pub(crate) fn reported_iters(tl: &Timeline) -> u64 {
    tl.completed.len() as u64
}

async fn join_all(mut set: JoinSet<Result<Timeline, Error>>) -> Result<Vec<Timeline>, Error> {
    let mut out = Vec::with_capacity(set.len());
    while let Some(r) = set.join_next().await {
        out.push(r.map_err(|e| format!("test task failed: {e}"))??);
    }
    Ok(out)
}

/// One size of `write_bw`/`read_bw` on every link at once, at the peer's buffers
/// `rem` (walked over `cycle` octets): the merged timeline.
pub(crate) async fn rdma_round(
    opts: &Opts,
    s: &Session,
    buf: &Mr,
    rem: &[Dest],
    size: usize,
    cycle: usize,
) -> Result<Timeline, Error> {
    let lim = limits(opts);
    let owned = opts.bytes.then(|| owned_copy(buf, buf.len())).transpose()?;
    let mut set = JoinSet::new();
    for (i, (link, r)) in s.links.iter().zip(rem).enumerate() {
        let prog = progress(opts, size, i, s.links.len());
        let run = bw::rdma(
            (opts.test, opts.atomic),
            lim,
            prog,
            link.qp.clone(),
            link.cq.clone(),
            (buf.clone(), owned.clone()),
            remote(r),
            size,
            cycle,
        );
        set.spawn(run);
    }
    Ok(Timeline::merge(join_all(set).await?))
}

/// One size of `send_bw`'s Sends on every link at once, each paced by the credits the
/// peer writes into that link's buffer in `credits`: the merged timeline. `sent`: the
/// Sends each link made before in this count (`--run_infinitely`'s intervals; 0 starts
/// a new count, as every size does).
pub(crate) async fn send_round(
    opts: &Opts,
    s: &Session,
    credits: &[Mr],
    payload: &Mr,
    size: usize,
    sent: u64,
) -> Result<Timeline, Error> {
    let lim = limits(opts);
    let owned = opts.bytes.then(|| owned_copy(payload, size)).transpose()?;
    let window = send::rx_depth(opts);
    let mut set = JoinSet::new();
    for (i, (link, credit)) in s.links.iter().zip(credits).enumerate() {
        if sent == 0 {
            // Counts start again with every size, as perftest's do (its server counts
            // the size's receives from 0): the last size's count is not credit.
            credit.write(0, &[0; 4])?;
        }
        let run = send::client(
            lim,
            progress(opts, size, i, s.links.len()),
            link.qp.clone(),
            link.cq.clone(),
            credit.clone(),
            (payload.clone(), owned.clone()),
            size,
            (window, sent),
        );
        set.spawn(run);
    }
    Ok(Timeline::merge(join_all(set).await?))
}

/// `--bytes`: the first `len` octets of `buf`, as owned `Bytes` that every request
/// slices.
fn owned_copy(buf: &Mr, len: usize) -> Result<Bytes, Error> {
    let mut v = vec![0; len];
    buf.read_into(0, &mut v)?;
    Ok(Bytes::from(v))
}

/// `send_bw`'s credit buffers, one per link, and our address messages naming them.
pub(crate) fn credit_buffers(opts: &Opts, s: &Session) -> Result<(Vec<Mr>, Vec<Dest>), Error> {
    let mut credits: Vec<Mr> = Vec::with_capacity(s.links.len());
    for i in 0..s.links.len() as u64 {
        credits.push(s.register(vec![0; 64], CREDIT_VA + i * 0x1000)?);
    }
    let mine = s
        .links
        .iter()
        .zip(&credits)
        .map(|(l, c)| Session::dest(opts, l, c, 0))
        .collect();
    Ok((credits, mine))
}

/// `send_bw`'s receive buffers: every link's receives posted.
pub(crate) fn inboxes(opts: &Opts, s: &Session) -> Result<Vec<Arc<Inbox>>, Error> {
    let depth = send::rx_depth(opts);
    let mut inboxes = Vec::with_capacity(s.links.len());
    for link in &s.links {
        let inbox = Inbox::new(&s.pd, depth, opts.buf_size())?;
        s.hold(inbox.mr());
        inbox.post_all(&link.qp)?;
        inboxes.push(Arc::new(inbox));
    }
    Ok(inboxes)
}

/// One size of `send_bw`'s receives on every link at once, each link's count (from 0)
/// RDMA Written into the peer's credit buffer named by `rem`. `-n` counts the receives;
/// with `-D` they end when `stop` turns true (then what still arrives within
/// [`send::DRAIN_IDLE`]). The timeline of the receives; with `--run_infinitely` none,
/// a line printed every `-D` seconds instead, until `stop`.
pub(crate) async fn receive_round(
    opts: &Opts,
    s: &Session,
    (p, size): (&Printer, usize),
    inboxes: &[Arc<Inbox>],
    rem: &[Dest],
    stop: &watch::Receiver<bool>,
) -> Result<Timeline, Error> {
    let epoch = Instant::now();
    let tally = opts.infinitely.then(|| Arc::new(AtomicU64::new(0)));
    // The interval lines stop with the round, however it ends.
    let _ticker = tally.clone().map(|t| {
        let (p, interval, gbits) = (*p, opts.duration.unwrap_or(INFINITE_INTERVAL), opts.gbits);
        AbortOnDrop(tokio::spawn(interval_lines(p, size, interval, gbits, t)))
    });
    let mut set = JoinSet::new();
    for ((link, inbox), r) in s.links.iter().zip(inboxes).zip(rem) {
        let (opts, qp, cq, inbox) = (
            opts.clone(),
            link.qp.clone(),
            link.recv_cq.clone(),
            inbox.clone(),
        );
        let credit = send::credit_buf(r.rkey, r.vaddr);
        let mut stop = stop.clone();
        let until = match opts.duration {
            Some(_) => Until::Barrier,
            None => Until::Count(opts.iters),
        };
        let tally = tally.clone();
        set.spawn(async move {
            let stop = async move {
                let _ = stop.wait_for(|v| *v).await;
            };
            let (wait, tally) = (test_wait(&opts), tally.as_deref());
            send::server(
                &opts,
                &qp,
                &cq,
                &inbox,
                credit,
                (until, stop),
                wait,
                epoch,
                tally,
            )
            .await
        });
    }
    let mut parts = Vec::new();
    while let Some(r) = set.join_next().await {
        // The first failure ends the round: dropping the set stops the other links.
        let at = r.map_err(|e| format!("receive task failed: {e}"))??;
        parts.push(Timeline::from_receives(at));
    }
    Ok(Timeline::merge(parts))
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `--run_infinitely` on the receiving side: every `interval`, the line of the receives
/// `tally` counted in it.
async fn interval_lines(
    p: Printer,
    size: usize,
    interval: Duration,
    gbits: bool,
    tally: Arc<AtomicU64>,
) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        let n = tally.swap(0, Ordering::Relaxed);
        let secs = last.elapsed().as_secs_f64().max(1e-9);
        last = Instant::now();
        let bw = report::scale(size as f64 * n as f64 / secs, gbits);
        p.line(&Outcome::Bw(BwReport {
            size: size as u64,
            iters: n,
            bw_peak: bw,
            bw_avg: bw,
            msg_rate: n as f64 / secs / 1e6,
        }));
    }
}

/// How long the server waits for the client to finish its test: [`TEST_WAIT`], or
/// with `--run_infinitely` as long as the client runs.
pub(crate) fn test_wait(opts: &Opts) -> Duration {
    if opts.infinitely {
        super::FOREVER
    } else {
        TEST_WAIT
    }
}
