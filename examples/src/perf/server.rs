//! The server: accepts the side channel and the test connection, answers the
//! exchange, stays passive during the test and prints the client's report.

use std::time::Duration;

use verbs::{Access, Device, Listener, Qp, QpConfig};

use super::comm::{Comm, Side};
use super::msg::{BwReport, Dest};
use super::{BUF_VA, Error, Opts, Test, preamble, report, send, step};

/// How long the server waits for the client to finish its test.
const TEST_WAIT: Duration = Duration::from_secs(3600);

/// Serves one perftest client on `listener`; returns the client's report.
pub async fn serve(dev: &Device, listener: &Listener, opts: &Opts) -> Result<BwReport, Error> {
    let incoming = listener.accept().await?;
    let peer = incoming.peer_addr();
    tracing::info!(%peer, "side channel request");
    let pd = dev.alloc_pd();
    let (mut comm, cfg) = Comm::prepare(&pd, dev.create_cq(16), Side::Server, opts.timeout)?;
    let qp = step(
        opts.timeout,
        "the side-channel accept",
        incoming.accept(&pd, cfg, b""),
    )
    .await??;
    comm.attach(qp);
    let peer_version = preamble(&comm).await?;

    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let buf = pd.register_va(vec![0xa5; opts.size], BUF_VA, access)?;
    let incoming = step(opts.timeout, "the test connection", listener.accept()).await??;
    let depth = send::rx_depth(opts.iters);
    let tcq = dev.create_cq(depth + 16);
    let mut tcfg = QpConfig::new(&tcq);
    let inbox = if opts.test == Test::SendBw {
        let inbox = pd.alloc_mr(depth * opts.size, Access::LOCAL_WRITE)?;
        for slot in 0..depth {
            tcfg = tcfg.recv(send::recv_wr(&inbox, slot, opts.size));
        }
        Some(inbox)
    } else {
        None
    };
    let tqp = step(
        opts.timeout,
        "the test accept",
        incoming.accept(&pd, tcfg, b""),
    )
    .await??;
    let (ird, ord) = tqp.ird_ord();
    comm.xchg(&Dest::SYNC, "barrier").await?;
    let mine = Dest {
        out_reads: opts.test.out_reads(),
        qpn: tqp.num().0,
        psn: 0x006a_a864,
        rkey: buf.stag().to_u32(),
        vaddr: buf.to(),
        ..Dest::default()
    };
    let rem = super::exchange_dests(&comm, &mine, opts.test).await?;
    println!("{}", report::RULE);
    println!(
        " iwperf {} server: peer {peer} (perftest {peer_version}), IRD/ORD {ird}/{ord}, \
         buffer RKey {:#010x} VAddr {:#018x}",
        opts.test.name(),
        mine.rkey,
        mine.vaddr
    );
    if let Some(inbox) = &inbox {
        let credit = send::credit_buf(rem.rkey, rem.vaddr);
        let secs = send::server(opts, &tqp, &tcq, inbox, credit, TEST_WAIT).await?;
        comm.xchg(&mine.encode(), "end barrier").await?;
        let rep = report::compute(opts.size, opts.iters, secs, opts.gbits);
        println!("{}", report::table(&rep, opts.gbits));
        return finish(opts, &comm, &tqp, rep).await;
    }
    comm.xchg_within(&mine.encode(), "end barrier", TEST_WAIT)
        .await?;
    let mut parts: [Vec<u8>; 5] = Default::default();
    for part in &mut parts {
        *part = comm
            .xchg(&[0; BwReport::PART_LEN], "report message")
            .await?;
    }
    let rep = BwReport::decode(&parts).ok_or("a report message shorter than 8 octets")?;
    comm.xchg(&mine.encode(), "closing barrier").await?;
    println!("{}", report::table(&rep, opts.gbits));
    finish(opts, &comm, &tqp, rep).await
}

async fn finish(opts: &Opts, comm: &Comm, tqp: &Qp, rep: BwReport) -> Result<BwReport, Error> {
    tqp.disconnect();
    let _ = step(opts.timeout, "the test disconnect", tqp.closed()).await;
    let qp = comm.qp()?;
    qp.disconnect();
    let _ = step(opts.timeout, "the side-channel disconnect", qp.closed()).await;
    Ok(rep)
}
