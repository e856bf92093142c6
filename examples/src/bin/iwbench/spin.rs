//! The ping-pong with both ends polling busily, the way latency-critical RDMA applications
//! (and perftest's latency tests) wait: no task sleeps, no wake-ups on the critical path.
//! The TCP baseline spins on non-blocking reads of a plain socket; the stack spins on
//! `Qp::poll_input` and `Cq::poll`. Each spin yields to the runtime between attempts, so
//! the connection's driver tasks still run when they have work.

use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;

use bytes::Bytes;
use verbs::{
    Access, Cq, Device, DeviceConfig, Mr, Payload, Qp, QpConfig, RecvWr, SendFlags, SendOp, SendWr,
    Wc,
};

use super::{Error, Meter, Run, tcp_pair};

/// Raw TCP ping-pong of 8 octets, `n` round trips, both ends busy-polling non-blocking
/// reads.
pub(crate) async fn tcp(n: usize) -> Result<Run, Error> {
    let (a, b) = tcp_pair().await?;
    let (a, b) = (a.into_std()?, b.into_std()?);
    let echo = tokio::spawn(async move {
        let mut m = [0u8; 8];
        for _ in 0..n {
            read_exact(&b, &mut m).await?;
            write_all(&b, &m).await?;
        }
        Ok::<_, io::Error>(())
    });
    let mut m = [1u8; 8];
    let meter = Meter::start();
    for _ in 0..n {
        write_all(&a, &m).await?;
        read_exact(&a, &mut m).await?;
    }
    let run = meter.stop();
    echo.await??;
    Ok(run)
}

async fn read_exact(sock: &std::net::TcpStream, buf: &mut [u8]) -> io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        match (&*sock).read(&mut buf[got..]) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => got += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn write_all(sock: &std::net::TcpStream, buf: &[u8]) -> io::Result<()> {
    let mut put = 0;
    while put < buf.len() {
        match (&*sock).write(&buf[put..]) {
            Ok(k) => put += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tokio::task::yield_now().await,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Send/Recv ping-pong of 8 octets between two devices, `n` round trips, both ends
/// busy-polling their CQ and their socket's input.
pub(crate) async fn rdma(n: usize) -> Result<Run, Error> {
    let cfg = DeviceConfig::default();
    let (server, client) = (Device::open(cfg.clone()), Device::open(cfg));
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let spd = server.alloc_pd();
    let echo = tokio::spawn(async move {
        let inbox = spd.alloc_mr(8, Access::LOCAL_WRITE)?;
        let cq = spd.device().create_cq(64);
        let qp = listener
            .accept()
            .await?
            .accept(&spd, QpConfig::new(&cq).recv(recv_wr(&inbox)), b"")
            .await?;
        let pong = Bytes::from_static(b"pongpong");
        for i in 0..n {
            next_recv(&qp, &cq).await?;
            if i + 1 < n {
                qp.post_recv(recv_wr(&inbox))?;
            }
            qp.post_send(send_wr(&pong))?;
        }
        Ok::<_, Error>(())
    });
    let cpd = client.alloc_pd();
    let cq = client.create_cq(64);
    let qp = client
        .connect(&cpd, addr, QpConfig::new(&cq), b"")
        .await?
        .qp;
    let inbox = cpd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let ping = Bytes::from_static(b"pingping");
    let meter = Meter::start();
    for _ in 0..n {
        qp.post_recv(recv_wr(&inbox))?;
        qp.post_send(send_wr(&ping))?;
        next_recv(&qp, &cq).await?;
    }
    let run = meter.stop();
    echo.await??;
    qp.disconnect();
    Ok(run)
}

fn recv_wr(inbox: &Mr) -> RecvWr {
    RecvWr {
        wr_id: 0,
        sgl: vec![inbox.local(..)],
    }
}

/// An unsignaled Send: the peer's answer says it arrived.
fn send_wr(data: &Bytes) -> SendWr {
    SendWr {
        wr_id: 0,
        op: SendOp::Send {
            data: Payload::Bytes(data.clone()),
            invalidate: None,
        },
        flags: SendFlags::NONE,
    }
}

/// Spins until the next receive completes.
async fn next_recv(qp: &Qp, cq: &Cq) -> Result<(), Error> {
    let mut got: Vec<Wc> = Vec::with_capacity(1);
    loop {
        qp.poll_input();
        if cq.poll(&mut got, 1)? > 0 {
            return match got.pop() {
                Some(wc) if wc.wc.is_ok() => Ok(()),
                other => Err(format!("receive failed: {other:?}").into()),
            };
        }
        tokio::task::yield_now().await;
    }
}
