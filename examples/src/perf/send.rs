//! `send_bw`'s test phase. iWARP has no RNR retry, so perftest's server tells the
//! client how many Sends it has received by RDMA Writing its receive count (a
//! host-order, i.e. little-endian, `u32`) into the client's credit buffer, the one the
//! client's [`super::msg::Dest`] names; it does so every `rx_depth / 3` receives and at
//! the end (capture `send-bw.pcapng`: counts 5, 10, 15, 16 for `-n 16`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use verbs::{Cq, Mr, Qp, RecvWr, RemoteBuf, STag, WcStatus};

use super::client::TX_DEPTH;
use super::{Error, Opts, step};

/// perftest's default RX depth, capped by the iteration count as perftest does.
pub fn rx_depth(iters: u64) -> usize {
    usize::try_from(iters.min(512)).unwrap_or(512)
}

/// How often the server reports its count: perftest's `rx_depth / 3`, at least 1.
pub fn credit_every(rx_depth: usize) -> u64 {
    (rx_depth / 3).max(1) as u64
}

/// The receive work request for slot `slot` of `inbox` (slots of `size` octets).
pub fn recv_wr(inbox: &Mr, slot: usize, size: usize) -> RecvWr {
    let at = slot * size;
    RecvWr {
        wr_id: slot as u64,
        sgl: vec![inbox.local(at..at + size)],
    }
}

/// The client: `opts.iters` Sends of `payload`, never more than the server's RX depth
/// beyond the count it last wrote into `credit` (offset 0).
pub async fn client(opts: &Opts, qp: &Qp, credit: &Mr, payload: Bytes) -> Result<(), Error> {
    let window = rx_depth(opts.iters) as u64;
    let deadline = Instant::now() + opts.timeout;
    let mut sent = 0u64;
    let mut pending = tokio::task::JoinSet::new();
    while sent < opts.iters {
        let got = credit.read(..4)?;
        let credits = u64::from(u32::from_le_bytes(
            got.as_slice().try_into().map_err(|_| "credit buffer")?,
        ));
        if sent - credits.min(sent) >= window {
            if Instant::now() > deadline {
                return Err(format!("no credit from the server after {sent} Sends").into());
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
            continue;
        }
        if pending.len() >= TX_DEPTH {
            if let Some(r) = step(opts.timeout, "a Send completion", pending.join_next()).await? {
                r.map_err(|e| format!("Send task failed: {e}"))??;
            }
            continue;
        }
        let qp = qp.clone();
        let data = payload.clone();
        pending.spawn(async move { qp.send(data).await });
        sent += 1;
        while let Some(r) = pending.try_join_next() {
            r.map_err(|e| format!("Send task failed: {e}"))??;
        }
    }
    while let Some(r) = step(opts.timeout, "the last Sends", pending.join_next()).await? {
        r.map_err(|e| format!("Send task failed: {e}"))??;
    }
    Ok(())
}

/// The server: receives `opts.iters` Sends into `inbox` (pre-posted, `rx_depth`
/// slots), reposting each and writing the count to `credit` on the client. Returns the
/// time from the first receive to the last.
pub async fn server(
    opts: &Opts,
    qp: &Qp,
    cq: &Cq,
    inbox: &Mr,
    credit: RemoteBuf,
    wait_first: Duration,
) -> Result<f64, Error> {
    let depth = rx_depth(opts.iters);
    let every = credit_every(depth);
    let mut received = 0u64;
    let mut started = None;
    while received < opts.iters {
        let limit = if received == 0 {
            wait_first
        } else {
            opts.timeout
        };
        let wc = step(limit, "the client's Sends", cq.next()).await??;
        if wc.wc.status != WcStatus::Success {
            return Err(format!("receive {received} completed with {:?}", wc.wc.status).into());
        }
        started.get_or_insert_with(Instant::now);
        received += 1;
        let slot = usize::try_from(wc.wc.wr_id).map_err(|_| "wr_id")?;
        if received + depth as u64 <= opts.iters {
            qp.post_recv(recv_wr(inbox, slot % depth, opts.size))?;
        }
        if received % every == 0 || received == opts.iters {
            let count = u32::try_from(received).unwrap_or(u32::MAX).to_le_bytes();
            let dst = RemoteBuf { len: 4, ..credit };
            step(
                opts.timeout,
                "the credit Write",
                qp.write(Bytes::copy_from_slice(&count), dst),
            )
            .await??;
        }
    }
    Ok(started.map_or(0.0, |s| s.elapsed().as_secs_f64()))
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
        let d = rx_depth(16);
        assert_eq!(d, 16);
        let every = credit_every(d);
        let at: Vec<u64> = (1..=16u64).filter(|r| r % every == 0 || *r == 16).collect();
        assert_eq!(at, vec![5, 10, 15, 16]);
        assert_eq!(rx_depth(5000), 512);
        assert_eq!(credit_every(1), 1);
        // The credit Write payload (frame 101): 05 00 00 00.
        assert_eq!(5u32.to_le_bytes(), [5, 0, 0, 0]);
    }
}
