//! The bandwidth tests' sending side: keeps `-t` operations in flight on one QP and
//! timestamps every post and every completion (for perftest's peak).

use std::time::{Duration, Instant};

use bytes::Bytes;

use verbs::{
    Cq, Mr, Payload, PostError, Qp, QpState, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcError,
};

use super::opts::AtomicOp;
use super::progress::Progress;
use super::report::Timeline;
use super::{Error, Test};

/// Pause while the gate (send_bw's credits) holds every post back.
const GATE_PAUSE: Duration = Duration::from_micros(200);

/// How much and how fast one QP's run goes.
#[derive(Copy, Clone, Debug)]
pub struct Limits {
    /// Operations in flight (`-t`).
    pub depth: usize,
    /// Operations to run (ignored with a deadline).
    pub iters: u64,
    /// `-D`: stop posting at this instant.
    pub deadline: Option<Instant>,
    /// The longest wait for one completion (or for the gate to open).
    pub timeout: Duration,
    /// The run's common clock.
    pub epoch: Instant,
}

impl Limits {
    fn more(&self, posted: u64) -> bool {
        if super::interrupted() {
            return false;
        }
        match self.deadline {
            Some(d) => Instant::now() < d,
            None => posted < self.iters,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// One RFC 7306 Atomic of the atomic tests on the peer's 8 octets at `dst`, the
/// original value into `result`.
pub fn atomic_op(op: AtomicOp, dst: RemoteBuf, result: Sge) -> SendOp {
    match op {
        AtomicOp::FetchAdd => SendOp::FetchAdd {
            dst,
            add: 1,
            mask: 0,
            result,
        },
        AtomicOp::CmpSwap => SendOp::CmpSwap {
            dst,
            compare: 0,
            compare_mask: u64::MAX,
            swap: 0,
            swap_mask: u64::MAX,
            result,
        },
    }
}

/// perftest's address walk (`increase_rem_addr`, `increase_loc_addr`): a message of up
/// to half the cycle buffer goes to the next place in it, the size rounded up to a cache
/// line apart, starting over at the buffer's start when the cycle is full; a larger one
/// always goes to the start. Returns the offset of each message in turn.
pub fn walk(size: usize, cycle: usize) -> impl FnMut() -> usize + Send + 'static {
    const CACHE_LINE: usize = 64;
    let step = size.div_ceil(CACHE_LINE).max(1) * CACHE_LINE;
    let places = if size <= cycle / 2 { cycle / step } else { 1 };
    let mut n = 0;
    move || {
        let off = (n % places.max(1)) * step;
        n += 1;
        off
    }
}

/// Runs send-queue operations made by `make` on `qp` as perftest does: raw posts (each
/// signaled, so every completion is timestamped), at most `lim.depth` in flight, posting
/// only while `gate(posted)` allows it, and completions taken from `cq` in batches (the
/// task sleeps on the CQ when nothing is there, so it leaves the core to the engine's
/// driver instead of spinning against it). No task or future per operation.
/// Returns their timestamps.
pub async fn pipeline<G, M>(
    lim: Limits,
    mut progress: Option<Progress>,
    qp: &Qp,
    cq: &Cq,
    mut gate: G,
    mut make: M,
) -> Result<Timeline, Error>
where
    G: FnMut(u64) -> Result<bool, Error>,
    M: FnMut() -> SendOp,
{
    let mut tl = Timeline::default();
    let mut posted = 0u64;
    let mut stalled_since: Option<Instant> = None;
    // The last post found the queue full short of the depth (through iwarpd, the
    // staging area of `--bytes` payloads): it waits for completions. With nothing in
    // flight that would be a library bug, and it says so after the timeout.
    let mut full = false;
    let mut wcs = Vec::with_capacity(lim.depth.max(1));
    loop {
        // Every free slot at once, in one post: the engine sends them together.
        let first = posted;
        while posted - (tl.completed.len() as u64) < lim.depth as u64 && lim.more(posted) {
            if !gate(posted)? {
                break;
            }
            tl.posted.push(lim.now());
            posted += 1;
        }
        if posted > first {
            let wrs = (first..posted).map(|id| SendWr {
                wr_id: id,
                op: make(),
                flags: SendFlags::SIGNALED,
            });
            full = false;
            match qp.post_send_batch(wrs) {
                Ok(()) => {}
                // The queue (or, through iwarpd, the staging area of `--bytes` payloads)
                // is full short of the depth: the rest waits for completions, or a moment.
                Err((n, PostError::QueueFull)) => {
                    posted = first + n as u64;
                    tl.posted.truncate(posted as usize);
                    full = true;
                }
                Err((n, e)) => {
                    return Err(format!("posting operation {}: {e}", first + n as u64 + 1).into());
                }
            }
        }
        if posted > first {
            stalled_since = None;
        }
        if posted == tl.completed.len() as u64 {
            if !lim.more(posted) {
                break;
            }
            // The gate (send_bw's credits), or a full queue, holds every post back.
            let waits_for = if full {
                "room in the send queue"
            } else {
                "the server's credits"
            };
            if qp.state() != QpState::Rts {
                return Err(format!(
                    "the connection ended while operation {} waited for {waits_for}",
                    posted + 1
                )
                .into());
            }
            let since = *stalled_since.get_or_insert_with(Instant::now);
            if since.elapsed() > lim.timeout {
                return Err(format!(
                    "operation {} waited {:?} for {waits_for}",
                    posted + 1,
                    lim.timeout
                )
                .into());
            }
            tokio::time::sleep(GATE_PAUSE).await;
            continue;
        }
        wcs.clear();
        if cq.poll(&mut wcs, lim.depth)? == 0 {
            let done = tl.completed.len() as u64 + 1;
            let wc = tokio::time::timeout(lim.timeout, cq.next())
                .await
                .map_err(|_| {
                    format!(
                        "timed out after {:?} waiting for completion {done}",
                        lim.timeout
                    )
                })??;
            wcs.push(wc);
            cq.poll(&mut wcs, lim.depth)?;
        }
        let now = lim.now();
        for wc in &wcs {
            if !wc.wc.is_ok() {
                let n = tl.completed.len() + 1;
                return Err(format!(
                    "completion {n}: {}",
                    WcError::Failed(Box::new(wc.wc.clone()))
                )
                .into());
            }
            tl.completed.push(now);
        }
        if let Some(p) = progress.as_mut() {
            p.tick(tl.completed.len() as u64);
        }
    }
    if let Some(p) = progress.as_mut() {
        p.finish();
    }
    Ok(tl)
}

/// `write_bw`/`read_bw` on one QP: Writes from `buf` to `dst`, or Reads of `dst` into
/// `buf`, `size` octets each, at the places perftest's walk of a `cycle`-octet buffer
/// gives ([`walk`]). Writes with `owned` (`--bytes`) send slices of it instead of `buf`.
#[allow(clippy::too_many_arguments)]
pub async fn rdma(
    (test, atomic): (Test, AtomicOp),
    lim: Limits,
    progress: Option<Progress>,
    qp: Qp,
    cq: Cq,
    (buf, owned): (Mr, Option<Bytes>),
    dst: RemoteBuf,
    size: usize,
    cycle: usize,
) -> Result<Timeline, Error> {
    let len = u32::try_from(size).map_err(|_| "size too large")?;
    let dst = RemoteBuf { len, ..dst };
    let mut at = walk(size, cycle);
    let make = move || {
        // Both sides' places move together, as perftest moves them.
        let off = at();
        let (dst, sink) = (
            RemoteBuf {
                to: dst.to + off as u64,
                ..dst
            },
            buf.local(off..off + size),
        );
        match test {
            Test::ReadBw => SendOp::Read {
                src: dst,
                dst: sink,
            },
            Test::AtomicBw => atomic_op(atomic, dst, sink),
            _ => SendOp::Write {
                data: owned.as_ref().map_or_else(
                    || Payload::Sgl([sink].into()),
                    |b| Payload::Bytes(b.slice(off..off + size)),
                ),
                dst,
            },
        }
    };
    pipeline(lim, progress, &qp, &cq, |_| Ok(true), make).await
}
