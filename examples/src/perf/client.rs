//! The client: connects twice, exchanges parameters, runs the RDMA Writes or Reads,
//! reports.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinSet;
use verbs::{Access, Device, Pd, Qp, QpConfig, RemoteBuf, STag};

use super::comm::{Comm, Side};
use super::msg::{BwReport, Dest};
use super::{BUF_VA, CREDIT_VA, Error, Opts, Test, preamble, report, send, step};

/// Work requests kept in flight (perftest's default TX depth is 128).
pub const TX_DEPTH: usize = 128;

/// Pause between connection attempts the server refused.
const CONNECT_RETRY: Duration = Duration::from_millis(100);

/// Runs the client side of `opts.test` against the server at `opts.socket_addr()`,
/// prints perftest's table and returns the report it also sent to the server.
pub async fn run_client(opts: &Opts) -> Result<BwReport, Error> {
    let dev = Device::open(opts.device_config());
    let pd = dev.alloc_pd();
    let (mut comm, cfg) = Comm::prepare(&pd, dev.create_cq(16), Side::Client, opts.timeout)?;
    let c = connect(opts, &dev, &pd, cfg, "the side-channel connection").await?;
    comm.attach(c.qp);
    first_delay(opts).await;
    let peer_version = preamble(&comm).await?;
    tracing::info!(%peer_version, "side channel ready");

    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let buf = pd.register_va(vec![0x5a; opts.size], BUF_VA, access)?;
    let tcq = dev.create_cq(16);
    let t = connect(opts, &dev, &pd, QpConfig::new(&tcq), "the test connection").await?;
    let tqp = t.qp;
    let (ird, ord) = tqp.ird_ord();
    first_delay(opts).await;
    comm.xchg(&Dest::SYNC, "barrier").await?;
    // send_bw advertises the credit buffer the server RDMA Writes its count into.
    let credit = pd.register_va(vec![0; 64], CREDIT_VA, access)?;
    let target = if opts.test == Test::SendBw {
        &credit
    } else {
        &buf
    };
    let mine = Dest {
        out_reads: opts.test.out_reads(),
        qpn: tqp.num().0,
        psn: 0x006a_a864,
        rkey: target.stag().to_u32(),
        vaddr: target.to(),
        ..Dest::default()
    };
    let rem = super::exchange_dests(&comm, &mine, opts.test).await?;
    println!("{}", report::RULE);
    println!(
        "                    {} BW Test (iwperf, perftest -R exchange, peer version {peer_version})",
        match opts.test {
            Test::WriteBw => "RDMA_Write",
            Test::ReadBw => "RDMA_Read",
            Test::SendBw => "Send",
        }
    );
    println!(
        " Transport: IW  Size: {}  Iterations: {}  IRD/ORD: {ird}/{ord}  CRC: {}",
        opts.size,
        opts.iters,
        if opts.crc { "asked" } else { "off" }
    );
    println!(
        " local address: QPN {:#06x} RKey {:#010x} VAddr {:#018x}",
        mine.qpn, mine.rkey, mine.vaddr
    );
    println!(
        " remote address: QPN {:#06x} RKey {:#010x} VAddr {:#018x}",
        rem.qpn, rem.rkey, rem.vaddr
    );

    let dst = RemoteBuf {
        stag: STag::from_u32(rem.rkey),
        to: rem.vaddr,
        len: u32::try_from(opts.size).map_err(|_| "size too large")?,
    };
    let started = Instant::now();
    if opts.test == Test::SendBw {
        send::client(opts, &tqp, &credit, Bytes::from(buf.read(..)?)).await?;
    } else {
        run_ops(opts, &tqp, &buf, dst).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let rep = report::compute(opts.size, opts.iters, secs, opts.gbits);
    println!("{}", report::table(&rep, opts.gbits));

    comm.xchg(&mine.encode(), "end barrier").await?;
    if opts.test != Test::SendBw {
        // send_bw's server measures its own receives: no report, no second barrier.
        for part in rep.encode() {
            comm.xchg(&part, "report message").await?;
        }
        comm.xchg(&mine.encode(), "closing barrier").await?;
    }
    tqp.disconnect();
    let _ = step(opts.timeout, "the test disconnect", tqp.closed()).await;
    let qp = comm.qp()?;
    qp.disconnect();
    let _ = step(opts.timeout, "the side-channel disconnect", qp.closed()).await;
    Ok(rep)
}

/// Connects, retrying while the server is not listening yet (perftest's
/// `retry_rdma_connect`): siw's perftest server needs a moment after the side-channel
/// barrier before it listens for the test connection, and answers a SYN with RST then.
async fn connect(
    opts: &Opts,
    dev: &Device,
    pd: &Pd,
    cfg: QpConfig,
    what: &str,
) -> Result<verbs::Connected, Error> {
    let deadline = Instant::now() + opts.timeout;
    loop {
        let res = step(
            opts.timeout,
            what,
            dev.connect(pd, opts.socket_addr(), cfg.clone(), b""),
        )
        .await?;
        match res {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() < deadline && e.to_string().contains("refused") => {
                tracing::debug!(%e, "{what}: retrying");
                tokio::time::sleep(CONNECT_RETRY).await;
            }
            Err(e) => return Err(format!("{what}: {e}").into()),
        }
    }
}

async fn first_delay(opts: &Opts) {
    if !opts.first_delay.is_zero() {
        tokio::time::sleep(opts.first_delay).await;
    }
}

/// Posts `opts.iters` Writes (or Reads) of the whole buffer, `TX_DEPTH` in flight.
async fn run_ops(opts: &Opts, qp: &Qp, buf: &verbs::Mr, dst: RemoteBuf) -> Result<(), Error> {
    let payload = Bytes::from(buf.read(..)?);
    let sink = buf.local(..);
    let mut set = JoinSet::new();
    let mut posted = 0u64;
    let mut done = 0u64;
    while done < opts.iters {
        while posted < opts.iters && set.len() < TX_DEPTH {
            let qp = qp.clone();
            match opts.test {
                Test::WriteBw => {
                    let data = payload.clone();
                    set.spawn(async move { qp.write(data, dst).await });
                }
                Test::ReadBw | Test::SendBw => {
                    set.spawn(async move { qp.read(dst, sink).await });
                }
            }
            posted += 1;
        }
        let what = format!("completion {} of {}", done + 1, opts.iters);
        match step(opts.timeout, &what, set.join_next()).await? {
            Some(r) => {
                r.map_err(|e| format!("{what}: task failed: {e}"))?
                    .map_err(|e| format!("{what}: {e}"))?;
                done += 1;
            }
            None => break,
        }
    }
    Ok(())
}
