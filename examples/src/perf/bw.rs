//! The bandwidth tests' sending side: keeps `-t` operations in flight on one QP and
//! timestamps every post and every completion (for perftest's peak).

use std::time::{Duration, Instant};

use verbs::{Completion, Mr, Payload, Qp, RemoteBuf, SendFlags, SendOp, WcError};

use super::progress::Progress;
use super::report::Timeline;
use super::{Error, Test, step};

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
        match self.deadline {
            Some(d) => Instant::now() < d,
            None => posted < self.iters,
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Runs operations made by `make`, at most `lim.depth` in flight, posting only while
/// `gate(posted)` allows it. Returns their timestamps.
pub async fn pipeline<G, M, F>(
    lim: Limits,
    mut progress: Option<Progress>,
    mut gate: G,
    mut make: M,
) -> Result<Timeline, Error>
where
    G: FnMut(u64) -> Result<bool, Error>,
    M: FnMut() -> F,
    F: Future<Output = Result<Completion, WcError>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut tl = Timeline::default();
    let mut posted = 0u64;
    let mut stalled_since: Option<Instant> = None;
    loop {
        let more = lim.more(posted);
        if more && set.len() < lim.depth {
            if gate(posted)? {
                stalled_since = None;
                tl.posted.push(lim.now());
                set.spawn(make());
                posted += 1;
                continue;
            }
            if set.is_empty() {
                let since = *stalled_since.get_or_insert_with(Instant::now);
                if since.elapsed() > lim.timeout {
                    return Err(format!(
                        "no credit from the server after {posted} Sends within {:?}",
                        lim.timeout
                    )
                    .into());
                }
                tokio::time::sleep(GATE_PAUSE).await;
                continue;
            }
        } else if !more && set.is_empty() {
            break;
        }
        let done = tl.completed.len() as u64 + 1;
        let what = format!("completion {done}");
        if let Some(r) = step(lim.timeout, &what, set.join_next()).await? {
            r.map_err(|e| format!("{what}: task failed: {e}"))?
                .map_err(|e| format!("{what}: {e}"))?;
            tl.completed.push(lim.now());
            if let Some(p) = progress.as_mut() {
                p.tick(done);
            }
        }
    }
    if let Some(p) = progress.as_mut() {
        p.finish();
    }
    Ok(tl)
}

/// `write_bw`/`read_bw` on one QP: Writes of `buf[..size]` to `dst`, or Reads of `dst`
/// into `buf[..size]`.
pub async fn rdma(
    test: Test,
    lim: Limits,
    progress: Option<Progress>,
    qp: Qp,
    buf: Mr,
    dst: RemoteBuf,
    size: usize,
) -> Result<Timeline, Error> {
    let len = u32::try_from(size).map_err(|_| "size too large")?;
    let dst = RemoteBuf { len, ..dst };
    let sink = buf.local(..size);
    let make = move || {
        let qp = qp.clone();
        let op = match test {
            Test::ReadBw => SendOp::Read {
                src: dst,
                dst: sink,
            },
            _ => SendOp::Write {
                data: Payload::Sgl(vec![sink]),
                dst,
            },
        };
        async move { qp.exec(op, SendFlags::NONE).await }
    };
    pipeline(lim, progress, |_| Ok(true), make).await
}
