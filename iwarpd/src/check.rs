//! `iwarpd check`: exercises a remote daemon. RDMA Writes of a pattern, each Read back
//! and compared; Sends whose echoes are compared; throughput printed; any mismatch or
//! error is an `Err` naming the cause.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{ConnectError, Cq, Engine, Qp, QpEnd, QpInit};
use rdmap::{Access, Completion, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge};

use crate::config::Config;
use crate::out;
use crate::proto::ServiceInfo;

/// How long one completion may take before the daemon counts as unresponsive.
const WAIT: Duration = Duration::from_secs(30);
/// Most rounds (Write + Read, or Send + echo) in flight at once.
const MAX_WINDOW: u32 = 8;
/// `--size` when none is given.
const DEFAULT_SIZE: u32 = 1 << 20;
const LOCAL: Access = Access::LOCAL_READ.union(Access::LOCAL_WRITE);

/// What to check.
#[derive(Clone, Debug)]
pub(crate) struct CheckOpts {
    /// The daemon, `HOST[:PORT]` (4791 when left out).
    pub(crate) addr: String,
    /// Octets per RDMA Write/Read.
    pub(crate) size: Option<u32>,
    /// Rounds per test.
    pub(crate) count: u32,
}

/// Runs the check, printing results on stdout.
pub(crate) async fn run(cfg: &Config, opts: &CheckOpts) -> Result<(), String> {
    let addr = crate::check_addr::resolve(&opts.addr).await?;
    let engine = Engine::new(cfg.engine_with(cfg.capture(false)?));
    let pd = engine.alloc_pd();
    let (send_cq, recv_cq) = (Cq::new(4096), Cq::new(4096));
    let mut init = QpInit::new(pd, &send_cq);
    init.completions = offload_engine::Completions::queues(&send_cq, &recv_cq);
    let (qp, private) = engine
        .connect(addr, init, b"iwarpd check")
        .await
        .map_err(|e| match e {
            ConnectError::Rejected { private_data, .. } => format!(
                "{addr} rejected the connection: \"{}\"",
                String::from_utf8_lossy(&private_data).escape_debug()
            ),
            e => format!("cannot connect to {addr}: {e}"),
        })?;
    let info = ServiceInfo::decode(&private).ok_or_else(|| {
        format!(
            "the MPA Reply from {addr} carried {} octets of private data, not the 16-octet \
             RemoteBuf an iwarpd sends: is {addr} an iwarpd?",
            private.len()
        )
    })?;
    let (ird, ord) = qp.ird_ord();
    out::line(&format!(
        "connected to {addr} ({}): remote buffer stag {} len {}, {} receive credits of {} \
         octets, IRD/ORD {ird}/{ord}",
        qp.num(),
        info.remote.stag,
        info.remote.len,
        info.credits,
        info.recv_size
    ));
    let size = match opts.size {
        Some(n) if n > info.remote.len => {
            return Err(format!(
                "--size {n} is larger than the daemon's buffer ({} octets): use --size {} or \
                 less, or start the daemon with a larger buffer_size",
                info.remote.len, info.remote.len
            ));
        }
        Some(n) => n,
        None => DEFAULT_SIZE.min(info.remote.len),
    };
    if size == 0 {
        return Err("the daemon advertised an empty buffer: nothing to write to".into());
    }
    let client = Client {
        engine,
        pd,
        qp,
        send_cq,
        recv_cq,
    };
    client.write_read(info.remote, size, opts.count).await?;
    client
        .send_echo(size.min(info.recv_size), info.credits, opts.count)
        .await?;
    client.qp.disconnect();
    match tokio::time::timeout(WAIT, client.qp.closed()).await {
        Ok(QpEnd::Closed) => {}
        Ok(end) => return Err(format!("the connection did not close gracefully: {end}")),
        Err(_) => return Err("the graceful close did not finish in time".into()),
    }
    out::line("check passed");
    Ok(())
}

/// The connected client side.
#[derive(Debug)]
struct Client {
    engine: Engine,
    pd: PdId,
    qp: Qp,
    send_cq: Cq,
    recv_cq: Cq,
}

impl Client {
    /// Rounds of: RDMA Write a fresh pattern to a rotating slot of the remote buffer, Read
    /// it back into local memory, compare.
    async fn write_read(&self, remote: RemoteBuf, size: u32, count: u32) -> Result<(), String> {
        let slots = (remote.len / size).max(1);
        let window = slots.min(MAX_WINDOW).min(count) as usize;
        let local = self.register(window * size as usize)?;
        // A slot is written again only after the Read of its previous round completed
        // (window <= slots), so each Read returns its own round's Write.
        let mut inflight = VecDeque::new();
        let mut scratch = vec![0; size as usize];
        let start = Instant::now();
        for i in 0..count {
            if inflight.len() == window
                && let Some(r) = inflight.pop_front()
            {
                self.finish_round(r, local, window, &mut scratch).await?;
            }
            let data = Bytes::from(pattern(u64::from(i), size as usize));
            let dst = remote.slice((i % slots) * size, size);
            let sink = Sge {
                stag: local,
                to: (i as usize % window) as u64 * u64::from(size),
                len: size,
            };
            self.post(
                2 * u64::from(i),
                "RDMA Write",
                SendOp::Write {
                    data: Payload::Bytes(data.clone()),
                    dst,
                },
            )?;
            self.post(
                2 * u64::from(i) + 1,
                "RDMA Read",
                SendOp::Read {
                    src: dst,
                    dst: sink,
                },
            )?;
            inflight.push_back((i, data, dst));
        }
        while let Some(r) = inflight.pop_front() {
            self.finish_round(r, local, window, &mut scratch).await?;
        }
        let t = start.elapsed().as_secs_f64();
        let octets = f64::from(count) * f64::from(size);
        let rotating = if slots == 1 {
            "all in one slot of the remote buffer".to_owned()
        } else {
            format!("rotating over {slots} slots of the remote buffer")
        };
        out::line(&format!(
            "RDMA Write + Read-back: {count} x {size} octets verified in {t:.3} s \
             ({:.1} MiB/s each way, {window} in flight, {rotating})",
            octets / t.max(1e-9) / f64::from(1 << 20)
        ));
        Ok(())
    }

    async fn finish_round(
        &self,
        (i, data, dst): (u32, Bytes, RemoteBuf),
        local: STag,
        window: usize,
        scratch: &mut [u8],
    ) -> Result<(), String> {
        let w = self
            .wait(&self.send_cq, &format!("RDMA Write #{i}"))
            .await?;
        let r = self.wait(&self.send_cq, &format!("RDMA Read #{i}")).await?;
        if (w.wr_id, r.wr_id) != (2 * u64::from(i), 2 * u64::from(i) + 1) {
            return Err(format!(
                "completions out of order: expected requests {} and {}, got {} and {}",
                2 * i,
                2 * i + 1,
                w.wr_id,
                r.wr_id
            ));
        }
        let to = (i as usize % window) as u64 * scratch.len() as u64;
        self.engine
            .tpt()
            .read(self.pd, local, to, scratch)
            .map_err(|e| format!("reading back round {i} locally: {e}"))?;
        if let Some(k) = first_diff(&data, scratch) {
            return Err(format!(
                "RDMA Read #{i} differs from what RDMA Write #{i} wrote, first at octet {k} \
                 (remote offset {}): wrote {:#04x}, read {:#04x}",
                dst.to + k as u64,
                data.get(k).copied().unwrap_or(0),
                scratch.get(k).copied().unwrap_or(0)
            ));
        }
        Ok(())
    }

    /// Sends of `msg` octets, at most `credits` unanswered, each echo compared.
    async fn send_echo(&self, msg: u32, credits: u32, count: u32) -> Result<(), String> {
        let window = credits.min(MAX_WINDOW).min(count) as usize;
        let rx = self.register(window * msg as usize)?;
        let recv = |slot: u64| RecvWr {
            wr_id: slot,
            sgl: [Sge {
                stag: rx,
                to: slot * u64::from(msg),
                len: msg,
            }]
            .into(),
        };
        for slot in 0..window as u64 {
            self.qp
                .post_recv(recv(slot))
                .map_err(|e| format!("posting a receive: {e}"))?;
        }
        let mut inflight = VecDeque::new();
        let mut scratch = vec![0; msg as usize];
        let start = Instant::now();
        for j in 0..count {
            if inflight.len() == window
                && let Some(m) = inflight.pop_front()
            {
                self.finish_echo(m, rx, &mut scratch, &recv).await?;
            }
            let data = Bytes::from(pattern(u64::from(j) | 1 << 40, msg as usize));
            self.post_unsignaled(
                u64::from(j),
                SendOp::Send {
                    data: Payload::Bytes(data.clone()),
                    invalidate: None,
                    immediate: None,
                },
            )?;
            inflight.push_back((j, data));
        }
        while let Some(m) = inflight.pop_front() {
            self.finish_echo(m, rx, &mut scratch, &recv).await?;
        }
        let t = start.elapsed().as_secs_f64();
        out::line(&format!(
            "Send + echo: {count} x {msg} octets verified in {t:.3} s ({:.0} messages/s, \
             {:.1} MiB/s each way, {window} in flight)",
            f64::from(count) / t.max(1e-9),
            f64::from(count) * f64::from(msg) / t.max(1e-9) / f64::from(1 << 20)
        ));
        Ok(())
    }

    async fn finish_echo(
        &self,
        (j, data): (u32, Bytes),
        rx: STag,
        scratch: &mut [u8],
        recv: &impl Fn(u64) -> RecvWr,
    ) -> Result<(), String> {
        let wc = self
            .wait(&self.recv_cq, &format!("the echo of Send #{j}"))
            .await?;
        if wc.byte_len as usize != data.len() {
            return Err(format!(
                "the echo of Send #{j} is {} octets long, the Send was {}",
                wc.byte_len,
                data.len()
            ));
        }
        self.engine
            .tpt()
            .read(self.pd, rx, wc.wr_id * scratch.len() as u64, scratch)
            .map_err(|e| format!("reading echo #{j} locally: {e}"))?;
        if let Some(k) = first_diff(&data, scratch) {
            return Err(format!(
                "the echo of Send #{j} differs from the Send first at octet {k}: sent {:#04x}, \
                 got {:#04x}",
                data.get(k).copied().unwrap_or(0),
                scratch.get(k).copied().unwrap_or(0)
            ));
        }
        self.qp
            .post_recv(recv(wc.wr_id))
            .map_err(|e| format!("posting a receive: {e}"))
    }

    fn register(&self, len: usize) -> Result<STag, String> {
        self.engine
            .tpt()
            .alloc_region(self.pd, len, Base::ZeroBased, LOCAL)
            .map_err(|e| format!("cannot register {len} octets locally: {e}"))
    }

    fn post(&self, wr_id: u64, what: &str, op: SendOp) -> Result<(), String> {
        self.qp
            .post_send(SendWr {
                wr_id,
                op,
                flags: SendFlags::SIGNALED,
            })
            .map_err(|e| format!("posting {what}: {e}"))
    }

    fn post_unsignaled(&self, wr_id: u64, op: SendOp) -> Result<(), String> {
        self.qp
            .post_send(SendWr {
                wr_id,
                op,
                flags: SendFlags::NONE,
            })
            .map_err(|e| format!("posting Send #{wr_id}: {e}"))
    }

    /// The next completion of `cq`, which must be a success.
    async fn wait(&self, cq: &Cq, what: &str) -> Result<Completion, String> {
        match tokio::time::timeout(WAIT, cq.next()).await {
            Err(_) => Err(format!(
                "{what}: no completion within {} s: the daemon stopped answering{}",
                WAIT.as_secs(),
                self.why().await
            )),
            Ok(Err(e)) => Err(format!("{what}: {e}")),
            Ok(Ok(wc)) if !wc.wc.is_ok() => {
                let term = wc
                    .wc
                    .term
                    .map(|t| format!(", Terminate: {t}"))
                    .unwrap_or_default();
                Err(format!(
                    "{what} failed ({:?}{term}){}",
                    wc.wc.status,
                    self.why().await
                ))
            }
            Ok(Ok(wc)) => Ok(wc.wc),
        }
    }

    /// How the queue pair ended, if it did (waiting a moment for the end to be known), and
    /// the first failed send-queue request, for error messages.
    async fn why(&self) -> String {
        let mut s = String::new();
        let mut errs = Vec::new();
        let _ = self.send_cq.poll(&mut errs, usize::MAX);
        if let Some(e) = errs.iter().find(|w| !w.wc.is_ok()) {
            let term = e.wc.term.map(|t| format!(": {t}")).unwrap_or_default();
            s.push_str(&format!(
                "; request {} failed with {:?}{term}",
                e.wc.wr_id, e.wc.status
            ));
        }
        let end = match self.qp.closed().now_or_never() {
            Some(end) => Some(end),
            None => tokio::time::timeout(Duration::from_secs(1), self.qp.closed())
                .await
                .ok(),
        };
        if let Some(end) = end {
            s.push_str(&format!("; the queue pair ended: {end}"));
        }
        s
    }
}

/// A reproducible pseudo-random pattern (splitmix64) for round `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut out = vec![0; len];
    for chunk in out.chunks_mut(8) {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let bytes = z.to_le_bytes();
        chunk.copy_from_slice(bytes.get(..chunk.len()).unwrap_or(&bytes));
    }
    out
}

/// The first index where `a` and `b` differ (or where one ends).
fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or_else(|| (a.len() != b.len()).then(|| a.len().min(b.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_per_round_and_repeat_per_seed() {
        let a = pattern(1, 1000);
        assert_eq!(a, pattern(1, 1000));
        assert_ne!(a, pattern(2, 1000));
        assert_eq!(
            &pattern(1, 13)[..],
            &a[..13],
            "a prefix of a longer pattern"
        );
        assert!(a.iter().any(|&b| b != a[0]), "not constant");
    }

    #[test]
    fn first_diff_finds_the_octet() {
        assert_eq!(first_diff(b"abcd", b"abcd"), None);
        assert_eq!(first_diff(b"abcd", b"abXd"), Some(2));
        assert_eq!(first_diff(b"abc", b"abcd"), Some(3));
    }
}
