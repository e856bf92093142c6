//! The 8-octet ping-pongs and their TCP baselines, waiting two ways:
//!
//! * [`Wait::Await`]: each end awaits its completions (the stack's send and CQ
//!   futures; tokio's `read_exact` for TCP), the line held to its target.
//! * [`Wait::Spin`]: both ends poll busily, the way latency-critical RDMA applications
//!   (and perftest's latency tests) wait. The stack spins on `Qp::poll_input` and
//!   `Cq::poll`, TCP on non-blocking reads of a plain socket. Each spin yields to the
//!   runtime between attempts, so the connections' driver tasks still run when they have
//!   work.

use std::io::{self, Read as _, Write as _};
use std::net::SocketAddr;

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use verbs::{
    Access, Cq, Device, DeviceConfig, Mr, Payload, Qp, QpConfig, RecvWr, SendFlags, SendOp, SendWr,
    Wc,
};

use super::{Error, Meter, Run, tcp_pair};

/// What each end sends per round trip.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// One Send of 8 octets.
    Send,
    /// One Send with Immediate Data (this stack's extension): 8 octets and a 32-bit value.
    SendImm,
    /// A Send of 8 octets, then RFC 7306 Immediate Data with the value: what delivering a
    /// value with a message takes without the extension (two messages, two receives).
    SendThenImmediate,
}

impl Msg {
    /// Receives one round trip consumes at each end.
    fn messages(self) -> usize {
        if self == Self::SendThenImmediate {
            2
        } else {
            1
        }
    }
}

/// How the ends of a ping-pong wait for the peer's message.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Wait {
    /// Await completions.
    Await,
    /// Poll busily.
    Spin,
}

/// Raw TCP ping-pong of 8 octets, `n` round trips.
pub(crate) async fn tcp(n: usize, wait: Wait) -> Result<Run, Error> {
    let (a, b) = tcp_pair().await?;
    match wait {
        Wait::Await => tcp_await(n, a, b).await,
        Wait::Spin => tcp_spin(n, a.into_std()?, b.into_std()?).await,
    }
}

async fn tcp_await(
    n: usize,
    mut a: tokio::net::TcpStream,
    mut b: tokio::net::TcpStream,
) -> Result<Run, Error> {
    let echo = tokio::spawn(async move {
        let mut m = [0u8; 8];
        for _ in 0..n {
            b.read_exact(&mut m).await?;
            b.write_all(&m).await?;
        }
        Ok::<_, io::Error>(())
    });
    let mut m = [1u8; 8];
    let meter = Meter::start();
    for _ in 0..n {
        a.write_all(&m).await?;
        a.read_exact(&mut m).await?;
    }
    let run = meter.stop();
    echo.await??;
    Ok(run)
}

async fn tcp_spin(n: usize, a: std::net::TcpStream, b: std::net::TcpStream) -> Result<Run, Error> {
    let echo = tokio::spawn(async move {
        let mut m = [0u8; 8];
        for _ in 0..n {
            spin_read_exact(&b, &mut m).await?;
            spin_write_all(&b, &m).await?;
        }
        Ok::<_, io::Error>(())
    });
    let mut m = [1u8; 8];
    let meter = Meter::start();
    for _ in 0..n {
        spin_write_all(&a, &m).await?;
        spin_read_exact(&a, &mut m).await?;
    }
    let run = meter.stop();
    echo.await??;
    Ok(run)
}

async fn spin_read_exact(sock: &std::net::TcpStream, buf: &mut [u8]) -> io::Result<()> {
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

async fn spin_write_all(sock: &std::net::TcpStream, buf: &[u8]) -> io::Result<()> {
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

/// Send/Recv ping-pong of 8 octets between two devices, `n` round trips, each way `msg`.
pub(crate) async fn rdma(n: usize, wait: Wait, msg: Msg) -> Result<Run, Error> {
    let k = msg.messages();
    let (client, server) = End::connect(k).await?;
    let echo = tokio::spawn(async move {
        let pong = Bytes::from_static(b"pongpong");
        for i in 0..n {
            for _ in 0..k {
                server.next_recv(wait).await?;
            }
            if i + 1 < n {
                for _ in 0..k {
                    server.post_recv()?;
                }
            }
            server.send(&pong, wait, msg, i as u32).await?;
        }
        Ok::<_, Error>(())
    });
    let ping = Bytes::from_static(b"pingping");
    let meter = Meter::start();
    for i in 0..n {
        for _ in 0..k {
            client.post_recv()?;
        }
        client.send(&ping, wait, msg, i as u32).await?;
        for _ in 0..k {
            client.next_recv(wait).await?;
        }
    }
    let run = meter.stop();
    echo.await??;
    client.qp.disconnect();
    Ok(run)
}

/// One end of a connected ping-pong: its queue pair, its CQ and an 8-octet inbox.
struct End {
    qp: Qp,
    cq: Cq,
    inbox: Mr,
}

impl End {
    /// Two devices connected over loopback: (client, server). The server's first `k`
    /// receives are posted at accept, before the client can send.
    async fn connect(k: usize) -> Result<(Self, Self), Error> {
        let cfg = DeviceConfig::default();
        let (server, client) = (Device::open(cfg.clone())?, Device::open(cfg)?);
        let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr();
        let (spd, scq) = (server.alloc_pd()?, server.create_cq(64));
        let sinbox = spd.alloc_mr(8, Access::LOCAL_WRITE)?;
        let accept = {
            let (scq, first) = (scq.clone(), recv_wr(&sinbox));
            tokio::spawn(async move {
                let inc = listener.accept().await?;
                let init = (0..k).fold(QpConfig::new(&scq), |c, _| c.recv(first.clone()));
                let qp = inc.accept(&spd, init, b"").await?;
                Ok::<_, Error>(qp)
            })
        };
        let (cpd, ccq) = (client.alloc_pd()?, client.create_cq(64));
        let cqp = client
            .connect(&cpd, addr, QpConfig::new(&ccq), b"")
            .await?
            .qp;
        let client = Self {
            qp: cqp,
            cq: ccq,
            inbox: cpd.alloc_mr(8, Access::LOCAL_WRITE)?,
        };
        let server = Self {
            qp: accept.await??,
            cq: scq,
            inbox: sinbox,
        };
        Ok((client, server))
    }

    fn post_recv(&self) -> Result<(), Error> {
        Ok(self.qp.post_recv(recv_wr(&self.inbox))?)
    }

    /// Sends `data` (and `value` as `msg` says): awaiting the completion, or (spinning)
    /// unsignaled, since the peer's answer says it arrived.
    async fn send(&self, data: &Bytes, wait: Wait, msg: Msg, value: u32) -> Result<(), Error> {
        let send = SendOp::Send {
            data: Payload::Bytes(data.clone()),
            invalidate: None,
            immediate: (msg == Msg::SendImm).then_some(value),
        };
        let mut ops = vec![send];
        if msg == Msg::SendThenImmediate {
            ops.push(SendOp::Immediate {
                data: u64::from(value),
            });
        }
        for op in ops {
            match wait {
                Wait::Await => {
                    self.qp.exec(op, SendFlags::NONE).await?;
                }
                Wait::Spin => self.qp.post_send(SendWr {
                    wr_id: 0,
                    op,
                    flags: SendFlags::NONE,
                })?,
            }
        }
        Ok(())
    }

    /// Waits for the next receive to complete.
    async fn next_recv(&self, wait: Wait) -> Result<(), Error> {
        let wc = match wait {
            Wait::Await => self.cq.next().await?,
            Wait::Spin => self.spin_next().await?,
        };
        if wc.wc.is_ok() {
            Ok(())
        } else {
            Err(format!("receive failed: {:?}", wc.wc.status).into())
        }
    }

    async fn spin_next(&self) -> Result<Wc, Error> {
        let mut got = Vec::with_capacity(1);
        loop {
            self.qp.poll_input();
            self.cq.poll(&mut got, 1)?;
            if let Some(wc) = got.pop() {
                return Ok(wc);
            }
            tokio::task::yield_now().await;
        }
    }
}

fn recv_wr(inbox: &Mr) -> RecvWr {
    RecvWr {
        wr_id: 0,
        sgl: [inbox.local(..)].into(),
    }
}
