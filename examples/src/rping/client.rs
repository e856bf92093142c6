//! The client role: advertise the source buffer, then the sink, once per ping.

use bytes::Bytes;
use verbs::{Access, Cq, Device, Mr, Qp, QpConfig, RecvWr, WcStatus};

use super::{Error, Opts, RECV_SLOT, RdmaInfo, c_str, ping_buffer, step};

/// Tagged offset of the source buffer: a user-space-looking virtual address, as rping
/// advertises (siw's own STags and TOs look like this on the wire).
const SOURCE_VA: u64 = 0x0000_7f00_0001_0000;
/// Tagged offset of the sink buffer.
const SINK_VA: u64 = 0x0000_7f00_0002_0000;
/// Receive slots kept posted: the server sends two messages per ping.
const SLOTS: u64 = 2;

/// What a client run did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Pings completed.
    pub pings: u64,
    /// Pings whose written-back data was verified (`-V`).
    pub verified: u64,
}

/// Connects to `opts.socket_addr()` and runs `opts.count` pings (forever if 0, or until
/// SIGINT: Ctrl-C ends the run after the ping under way, with its statistics). Prints
/// `ping data: ...` per ping with `-v`; fails on the first error or (with `-V`) mismatch.
pub async fn run_client(opts: &Opts) -> Result<ClientStats, Error> {
    let dev = Device::open(opts.device_config())?;
    let pd = dev.alloc_pd()?;
    let size = opts.size;
    let source = pd.register_va(
        vec![0; size],
        SOURCE_VA,
        Access::REMOTE_READ | Access::LOCAL_WRITE,
    )?;
    let sink = pd.register_va(
        vec![0; size],
        SINK_VA,
        Access::REMOTE_WRITE | Access::LOCAL_WRITE,
    )?;
    let inbox = pd.alloc_mr(RECV_SLOT * SLOTS as usize, Access::LOCAL_WRITE)?;
    let cq = dev.create_cq(64);
    let mut cfg = QpConfig::new(&cq);
    for slot in 0..SLOTS {
        cfg = cfg.recv(recv_wr(&inbox, slot));
    }
    let addr = opts.socket_addr();
    let conn = step(
        crate::connect_limit(opts.timeout),
        "the connection",
        dev.connect(&pd, addr, cfg, b""),
    )
    .await?
    .map_err(|e| format!("connecting to {addr}: {e}"))?;
    let qp = conn.qp;
    let (ird, ord) = qp.ird_ord();
    tracing::info!(%addr, ird, ord, "connected");
    super::note_extensions(opts, &qp);
    if !opts.first_delay.is_zero() {
        // siw as the responder may miss an FPDU arriving right after its MPA Reply.
        tokio::time::sleep(opts.first_delay).await;
    }
    let mut stats = ClientStats::default();
    let result = match ping_loop(opts, &qp, &cq, &inbox, &source, &sink, &mut stats).await {
        Err(e) => Err(crate::explain_end(&qp, e).await),
        ok => ok,
    };
    qp.disconnect();
    let end = step(opts.timeout, "the disconnect", qp.closed()).await;
    tracing::info!(?end, "closed");
    result.map(|()| stats)
}

#[allow(clippy::too_many_arguments)]
async fn ping_loop(
    opts: &Opts,
    qp: &Qp,
    cq: &Cq,
    inbox: &Mr,
    source: &Mr,
    sink: &Mr,
    stats: &mut ClientStats,
) -> Result<(), Error> {
    let mut ping = 0u64;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = tokio::spawn({
        let stop = stop.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    let _watching = AbortOnDrop(watch);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && (opts.count == 0 || ping < opts.count)
    {
        let data = ping_buffer(ping, opts.size);
        source.write(0, &data)?;
        sink.write(0, &vec![0; opts.size])?;
        let info = RdmaInfo::from_remote(source.remote()).encode();
        step(
            opts.timeout,
            "the source advertisement Send",
            qp.send(Bytes::copy_from_slice(&info)),
        )
        .await??;
        recv_one(opts, qp, cq, inbox, "the server's go-ahead Send").await?;
        let info = RdmaInfo::from_remote(sink.remote()).encode();
        step(
            opts.timeout,
            "the sink advertisement Send",
            qp.send(Bytes::copy_from_slice(&info)),
        )
        .await??;
        recv_one(opts, qp, cq, inbox, "the server's done Send").await?;
        let got = sink.read(..)?;
        if opts.validate {
            if got != data {
                return Err(format!(
                    "ping {ping}: data mismatch: sent {:?}, got back {:?}",
                    c_str(&data),
                    c_str(&got)
                )
                .into());
            }
            stats.verified += 1;
        }
        if opts.verbose {
            crate::outln!("ping data: {}", c_str(&got));
        }
        stats.pings += 1;
        ping += 1;
    }
    Ok(())
}

/// Ends a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn recv_wr(inbox: &Mr, slot: u64) -> RecvWr {
    let at = slot as usize * RECV_SLOT;
    RecvWr {
        wr_id: slot,
        sgl: [inbox.local(at..at + RECV_SLOT)].into(),
    }
}

/// Waits for one receive completion and reposts its slot.
async fn recv_one(opts: &Opts, qp: &Qp, cq: &Cq, inbox: &Mr, what: &str) -> Result<(), Error> {
    let wc = step(opts.timeout, what, cq.next()).await??;
    if wc.wc.status != WcStatus::Success {
        return Err(format!("{what}: receive completed with {:?}", wc.wc.status).into());
    }
    qp.post_recv(recv_wr(inbox, wc.wc.wr_id % SLOTS))?;
    Ok(())
}
