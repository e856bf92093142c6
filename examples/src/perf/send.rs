//! `send_bw`'s test phase. iWARP has no RNR retry, so perftest's server tells the
//! client how many Sends it has received by RDMA Writing its receive count (a
//! host-order, i.e. little-endian, `u32`) into the client's credit buffer, the one the
//! client's [`super::msg::Dest`] names; it does so every `rx_depth / 3` receives and at
//! the end (capture `send-bw.pcapng`: counts 5, 10, 15, 16 for `-n 16`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use verbs::{Cq, Mr, Pd, Qp, RecvWr, RemoteBuf, STag, WcStatus};
use verbs::{Payload, SendOp};

use super::bw::{Limits, pipeline};
use super::progress::Progress;
use super::report::Timeline;
use super::{Error, Opts, step};

/// perftest's default RX depth, capped by the iteration count as perftest does
/// (`-D` runs use the full 512).
pub fn rx_depth(opts: &Opts) -> usize {
    let iters = if opts.duration.is_some() {
        u64::MAX
    } else {
        opts.iters
    };
    usize::try_from(iters.min(512)).unwrap_or(512)
}

/// How often the server reports its count: perftest's `rx_depth / 3`, at least 1.
pub fn credit_every(rx_depth: usize) -> u64 {
    (rx_depth / 3).max(1) as u64
}

/// At most this much memory backs one QP's receives; beyond it receives share slots
/// (perftest's cycle buffer does the same: the data is not looked at).
const INBOX_LIMIT: usize = 64 << 20;

/// Receive buffers: `depth` receives of `slot` octets over `slots` slots of memory.
#[derive(Debug)]
pub struct Inbox {
    mr: Mr,
    slot: usize,
    slots: usize,
    depth: usize,
}

impl Inbox {
    /// Allocates the memory for `depth` receives of `slot` octets.
    pub fn new(pd: &Pd, depth: usize, slot: usize) -> Result<Self, Error> {
        let slot = slot.max(1);
        let slots = depth.min((INBOX_LIMIT / slot).max(1)).max(1);
        let mr = pd.alloc_mr(slots * slot, verbs::Access::LOCAL_WRITE)?;
        Ok(Self {
            mr,
            slot,
            slots,
            depth,
        })
    }

    /// The receive with id `id` (its memory is slot `id % slots`).
    pub fn wr(&self, id: u64) -> RecvWr {
        let at = (id as usize % self.slots) * self.slot;
        RecvWr {
            wr_id: id,
            sgl: [self.mr.local(at..at + self.slot)].into(),
        }
    }

    /// Posts all `depth` receives on `qp`.
    pub fn post_all(&self, qp: &Qp) -> Result<(), Error> {
        for id in 0..self.depth as u64 {
            qp.post_recv(self.wr(id))?;
        }
        Ok(())
    }

    /// The memory the receives land in.
    pub fn mr(&self) -> &Mr {
        &self.mr
    }

    /// The receives kept posted.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

/// The client on one QP: Sends of `payload[..size]` (or of `owned`, `--bytes`), never more than `window`
/// beyond the count the server last wrote into `credit` (offset 0). `(window, sent)`:
/// `sent` Sends were made before in this count. Counts start at 0 with every size
/// (`-a`), as perftest's do, and run on through `--run_infinitely`'s intervals; they
/// are perftest's 32-bit counts, compared modulo 2^32.
#[allow(clippy::too_many_arguments)]
pub async fn client(
    lim: Limits,
    progress: Option<Progress>,
    qp: Qp,
    cq: Cq,
    credit: Mr,
    (payload, owned): (Mr, Option<Bytes>),
    size: usize,
    (window, sent): (usize, u64),
) -> Result<Timeline, Error> {
    let sge = payload.local(..size);
    let window = i32::try_from(window).unwrap_or(i32::MAX);
    let gate = move |posted: u64| -> Result<bool, Error> {
        let mut got = [0u8; 4];
        credit.read_into(0, &mut got)?;
        let credits = u32::from_le_bytes(got);
        // Signed, as perftest compares: a count the server wrote late for the last
        // size is ahead of this size's Sends and holds nothing up.
        let ahead = ((sent + posted) as u32).wrapping_sub(credits) as i32;
        Ok(ahead < window)
    };
    let make = move || SendOp::Send {
        data: owned
            .as_ref()
            .map_or_else(|| Payload::Sgl([sge].into()), |b| Payload::Bytes(b.clone())),
        invalidate: None,
        immediate: None,
    };
    pipeline(lim, progress, &qp, &cq, gate, make).await
}

/// What ends the server's receive loop.
#[derive(Debug)]
pub enum Until {
    /// This many receives.
    Count(u64),
    /// The client's end barrier on the side channel (`-D`): then whatever still
    /// arrives within [`DRAIN_IDLE`].
    Barrier,
}

/// `-D`: after the client's end barrier the server keeps receiving until the link
/// has been quiet this long.
pub const DRAIN_IDLE: Duration = Duration::from_millis(200);

/// The server on one QP: receives into `inbox` (all posted beforehand), reposting
/// each and RDMA Writing the run's count (from 0) to `credit` on the client
/// every `rx_depth / 3` receives and at the end. `barrier`: resolves when the client's
/// end barrier arrived (ends a `-D` run). Returns the receive times (ns since `epoch`),
/// or with `tally` (`--run_infinitely`, which would pile them up) none: each receive
/// adds 1 to it instead.
#[allow(clippy::too_many_arguments)]
pub async fn server<B>(
    opts: &Opts,
    qp: &Qp,
    cq: &Cq,
    inbox: &Inbox,
    credit: RemoteBuf,
    (until, barrier): (Until, B),
    wait_first: Duration,
    epoch: Instant,
    tally: Option<&AtomicU64>,
) -> Result<Vec<u64>, Error>
where
    B: Future<Output = ()>,
{
    let every = credit_every(inbox.depth());
    let mut received = 0u64;
    let mut at = Vec::new();
    let mut barrier = std::pin::pin!(barrier);
    let mut draining = false;
    let write_count = async |n: u64| -> Result<(), Error> {
        let count = (n as u32).to_le_bytes();
        let dst = RemoteBuf { len: 4, ..credit };
        step(
            opts.timeout,
            "the credit Write",
            qp.write(Bytes::copy_from_slice(&count), dst),
        )
        .await??;
        Ok(())
    };
    loop {
        if let Until::Count(n) = until
            && received >= n
        {
            break;
        }
        if super::interrupted() {
            // Ctrl-C: what arrived so far is the measurement.
            break;
        }
        let limit = if draining {
            DRAIN_IDLE
        } else if received == 0 {
            wait_first
        } else {
            opts.timeout
        };
        let wc = tokio::select! {
            biased;
            wc = cq.next() => wc,
            () = &mut barrier, if matches!(until, Until::Barrier) && !draining => {
                draining = true;
                continue;
            }
            () = super::interrupt::wait() => continue,
            () = tokio::time::sleep(limit) => {
                if draining {
                    break;
                }
                let why = if received > 0 {
                    ": the client stopped sending, or the network between stopped carrying \
                     it (the connection is still up)"
                } else {
                    ""
                };
                return Err(format!(
                    "timed out after {limit:?} waiting for the client's Sends \
                     ({received} received){why}"
                )
                .into());
            }
        }?;
        if wc.wc.status != WcStatus::Success {
            return Err(format!("receive {received} completed with {:?}", wc.wc.status).into());
        }
        match tally {
            Some(t) => {
                t.fetch_add(1, Ordering::Relaxed);
            }
            None => at.push(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)),
        }
        received += 1;
        qp.post_recv(inbox.wr(wc.wc.wr_id))?;
        if received.is_multiple_of(every) {
            write_count(received).await?;
        }
    }
    if !received.is_multiple_of(every) {
        write_count(received).await?;
    }
    Ok(at)
}

/// The client's credit buffer as the server sees it.
pub fn credit_buf(rkey: u32, vaddr: u64) -> RemoteBuf {
    RemoteBuf {
        stag: STag::from_u32(rkey),
        to: vaddr,
        len: 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_cadence_matches_capture() {
        // send-bw.pcapng, -n 16: RX depth 16, credits written at 5, 10, 15 and 16.
        let opts = |n: &str| Opts::parse(["send_bw", "-n", n].map(String::from)).unwrap();
        let d = rx_depth(&opts("16"));
        assert_eq!(d, 16);
        let every = credit_every(d);
        let at: Vec<u64> = (1..=16u64).filter(|r| r % every == 0 || *r == 16).collect();
        assert_eq!(at, vec![5, 10, 15, 16]);
        assert_eq!(rx_depth(&opts("5000")), 512);
        assert_eq!(credit_every(1), 1);
        // The credit Write payload (frame 101): 05 00 00 00.
        assert_eq!(5u32.to_le_bytes(), [5, 0, 0, 0]);
    }
}
