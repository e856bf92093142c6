//! The server role: RDMA Read the client's buffer, Send "go ahead", RDMA Write the data
//! back to the client's sink, Send "done".

use bytes::Bytes;
use verbs::{Access, Cq, Device, Listener, Mr, Qp, QpConfig, RecvWr, WcStatus};

use super::{Error, MAX_SIZE, Opts, RECV_SLOT, RdmaInfo, c_str, step};

/// Tagged offset of the server's read sink.
const RDMA_VA: u64 = 0x0000_7f00_0003_0000;
/// Receive slots kept posted: the client sends two messages per ping.
const SLOTS: u64 = 2;

/// What one served connection did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Connections served.
    pub connections: u64,
    /// Pings completed over all connections.
    pub pings: u64,
}

/// Serves rping clients on `listener`: one connection, or connection after connection
/// with `-P`. A connection ends when the client leaves or after `-C` pings.
pub async fn serve(dev: &Device, listener: &Listener, opts: &Opts) -> Result<ServerStats, Error> {
    let mut stats = ServerStats::default();
    loop {
        let incoming = listener.accept().await?;
        let peer = incoming.peer_addr();
        tracing::info!(%peer, ird_ord = ?incoming.peer_ird_ord(), "connection request");
        let result = serve_one(dev, incoming, opts, &mut stats).await;
        stats.connections += 1;
        match result {
            Ok(()) => tracing::info!(%peer, "client done"),
            Err(e) if opts.persistent => crate::errln!("iwarp-rping: connection from {peer}: {e}"),
            Err(e) => return Err(e),
        }
        if !opts.persistent {
            return Ok(stats);
        }
    }
}

async fn serve_one(
    dev: &Device,
    incoming: verbs::Incoming,
    opts: &Opts,
    stats: &mut ServerStats,
) -> Result<(), Error> {
    let pd = dev.alloc_pd()?;
    let cq = dev.create_cq(64);
    let inbox = pd.alloc_mr(RECV_SLOT * SLOTS as usize, Access::LOCAL_WRITE)?;
    let rdma = pd.register_va(vec![0; MAX_SIZE], RDMA_VA, Access::LOCAL_WRITE)?;
    let mut cfg = QpConfig::new(&cq);
    for slot in 0..SLOTS {
        cfg = cfg.recv(recv_wr(&inbox, slot));
    }
    let qp = step(opts.timeout, "the accept", incoming.accept(&pd, cfg, b"")).await??;
    super::note_extensions(opts, &qp);
    let result = match ping_loop(opts, &qp, &cq, &inbox, &rdma, stats).await {
        Err(e) => Err(crate::explain_end(&qp, e).await),
        ok => ok,
    };
    qp.disconnect();
    let end = step(opts.timeout, "the disconnect", qp.closed()).await;
    tracing::info!(?end, "closed");
    result
}

async fn ping_loop(
    opts: &Opts,
    qp: &Qp,
    cq: &Cq,
    inbox: &Mr,
    rdma: &Mr,
    stats: &mut ServerStats,
) -> Result<(), Error> {
    let mut ping = 0u64;
    while opts.count == 0 || ping < opts.count {
        // The first advertisement may take as long as the client likes; its absence
        // (a flushed receive) is the client leaving.
        let Some(src) = recv_info(qp, cq, inbox, None).await? else {
            if ping == 0 {
                return Err(left_before_first_ping(qp, opts).await);
            }
            return Ok(());
        };
        let len = src.size as usize;
        if len > MAX_SIZE {
            return Err(format!("the client advertised {len} octets, more than {MAX_SIZE}").into());
        }
        step(
            opts.timeout,
            "the RDMA Read",
            qp.read(src.remote(), rdma.local(..len)),
        )
        .await??;
        let data = rdma.read(..len)?;
        if opts.verbose {
            crate::outln!("server ping data: {}", c_str(&data));
        }
        // rping's server Sends its (unused) 16-octet send buffer as the go-ahead.
        step(
            opts.timeout,
            "the go-ahead Send",
            qp.send(Bytes::from_static(&[0; 16])),
        )
        .await??;
        let Some(dst) = recv_info(qp, cq, inbox, Some(opts)).await? else {
            return Err("the client left before advertising its sink".into());
        };
        // rping writes strlen(data) + 1 octets.
        let n = data
            .iter()
            .position(|&b| b == 0)
            .map_or(data.len(), |p| p + 1)
            .min(dst.size as usize);
        let payload = Bytes::from(data).slice(..n);
        let mut dst_buf = dst.remote();
        dst_buf.len = n as u32;
        step(opts.timeout, "the RDMA Write", qp.write(payload, dst_buf)).await??;
        step(
            opts.timeout,
            "the done Send",
            qp.send(Bytes::from_static(&[0; 16])),
        )
        .await??;
        stats.pings += 1;
        ping += 1;
    }
    Ok(())
}

/// Why a connection that ended before its first ping failed, with what may have caused
/// it: a client closes right after the MPA Reply when it refuses what the Reply said.
async fn left_before_first_ping(qp: &Qp, opts: &Opts) -> Error {
    let end = qp.closed().await;
    let hint = if opts.crc {
        "; a client that refuses MPA CRC closes right after this server's Reply turns it \
         on (Linux siw with mpa_crc_strict does): serve without --crc"
    } else {
        ""
    };
    format!("the client left before its first ping (the connection: {end}){hint}").into()
}

fn recv_wr(inbox: &Mr, slot: u64) -> RecvWr {
    let at = slot as usize * RECV_SLOT;
    RecvWr {
        wr_id: slot,
        sgl: [inbox.local(at..at + RECV_SLOT)].into(),
    }
}

/// The next advertisement from the client; `None` if the connection ended instead.
/// `timeout` bounds the wait when given.
async fn recv_info(
    qp: &Qp,
    cq: &Cq,
    inbox: &Mr,
    timeout: Option<&Opts>,
) -> Result<Option<RdmaInfo>, Error> {
    let next = async {
        tokio::select! {
            wc = cq.next() => Some(wc),
            _ = qp.closed() => None,
        }
    };
    let wc = match timeout {
        Some(o) => step(o.timeout, "the client's sink advertisement", next).await?,
        None => next.await,
    };
    let Some(wc) = wc else { return Ok(None) };
    let wc = wc?;
    match wc.wc.status {
        WcStatus::Success => {}
        WcStatus::Flushed => return Ok(None),
        other => return Err(format!("receive completed with {other:?}").into()),
    }
    let slot = wc.wc.wr_id % SLOTS;
    let at = slot as usize * RECV_SLOT;
    let msg = inbox.read(at..at + (wc.wc.byte_len as usize).min(RECV_SLOT))?;
    qp.post_recv(recv_wr(inbox, slot))?;
    let info = RdmaInfo::decode(&msg)
        .ok_or_else(|| format!("advertisement of {} octets, want 16", msg.len()))?;
    Ok(Some(info))
}
