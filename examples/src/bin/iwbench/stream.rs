//! `RdmaStream` against `TcpStream`, the same generic code over both: throughput with
//! 64 KiB and 64-octet writes, and an 8-octet ping-pong.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use verbs::{RdmaListener, RdmaStream};

use super::{Error, Meter, Opts, Run, median};

const LOOPBACK: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

async fn tcp_pair() -> Result<(TcpStream, TcpStream), Error> {
    let l = TcpListener::bind(LOOPBACK).await?;
    let (a, b) = tokio::join!(TcpStream::connect(l.local_addr()?), l.accept());
    let (a, b) = (a?, b?.0);
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    Ok((a, b))
}

async fn rdma_pair() -> Result<(RdmaStream, RdmaStream), Error> {
    let l = RdmaListener::bind(LOOPBACK).await?;
    let (a, b) = tokio::join!(RdmaStream::connect(l.local_addr()?), l.accept());
    Ok((a?, b?.0))
}

/// `total` octets from `a` to `b` in writes of `chunk`; the time until `b` read the last.
async fn stream_bw<S>(a: S, mut b: S, total: usize, chunk: usize) -> Result<Run, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let meter = Meter::start();
    let writer = tokio::spawn(async move {
        let mut a = a;
        let buf = vec![0x5a; chunk];
        let mut left = total;
        while left > 0 {
            let n = chunk.min(left);
            a.write_all(&buf[..n]).await?;
            left -= n;
        }
        a.shutdown().await?;
        Ok::<_, std::io::Error>(a)
    });
    let mut buf = vec![0; 256 << 10];
    let mut got = 0;
    loop {
        let n = b.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let run = meter.stop();
    let _a = writer.await??;
    if got != total {
        return Err(format!("read {got} octets of {total}").into());
    }
    Ok(run)
}

/// `n` round trips of 8 octets from `a` to `b` and back.
async fn stream_pingpong<S>(mut a: S, b: S, n: usize) -> Result<Run, Error>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let echo = tokio::spawn(async move {
        let mut b = b;
        let mut m = [0u8; 8];
        for _ in 0..n {
            b.read_exact(&mut m).await?;
            b.write_all(&m).await?;
        }
        Ok::<_, std::io::Error>(b)
    });
    let meter = Meter::start();
    let mut m = [0u8; 8];
    for i in 0..n as u64 {
        a.write_all(&i.to_be_bytes()).await?;
        a.read_exact(&mut m).await?;
        if m != i.to_be_bytes() {
            return Err("the ping-pong echo differs".into());
        }
    }
    let run = meter.stop();
    let _b = echo.await??;
    Ok(run)
}

/// The three comparisons, each the median of `o.rounds` alternating runs.
pub(super) async fn compare(o: &Opts) -> Result<(), Error> {
    let big = o.total.min(1 << 30);
    let small = (big / 64).min(16 << 20);
    let lines: [(&str, usize, usize); 2] = [
        ("byte stream, 64 KiB writes", big, 64 << 10),
        ("byte stream, 64 B writes", small, 64),
    ];
    for (what, total, chunk) in lines {
        let (mut rdma, mut tcp) = (Vec::new(), Vec::new());
        for _ in 0..o.rounds {
            let (a, b) = tcp_pair().await?;
            tcp.push(stream_bw(a, b, total, chunk).await?);
            let (a, b) = rdma_pair().await?;
            rdma.push(stream_bw(a, b, total, chunk).await?);
        }
        let (rdma, tcp) = (median(rdma).ok_or("no run")?, median(tcp).ok_or("no run")?);
        let rate = |r: &Run| total as f64 / r.wall.as_secs_f64().max(1e-9);
        if chunk >= 4096 {
            let gbit = |r: &Run| rate(r) * 8.0 / 1e9;
            examples::outln!(
                "{what:<28} {:>9.2} Gbit/s   TcpStream {:.2} Gbit/s   ratio {:.2}x",
                gbit(&rdma),
                gbit(&tcp),
                gbit(&rdma) / gbit(&tcp)
            );
        } else {
            let mps = |r: &Run| rate(r) / chunk as f64 / 1e6;
            examples::outln!(
                "{what:<28} {:>9.2} M writes/s   TcpStream {:.2} M writes/s   ratio {:.2}x",
                mps(&rdma),
                mps(&tcp),
                mps(&rdma) / mps(&tcp)
            );
        }
    }
    let (mut rdma, mut tcp) = (Vec::new(), Vec::new());
    for _ in 0..o.rounds {
        let (a, b) = tcp_pair().await?;
        tcp.push(stream_pingpong(a, b, o.pings).await?);
        let (a, b) = rdma_pair().await?;
        rdma.push(stream_pingpong(a, b, o.pings).await?);
    }
    let (rdma, tcp) = (median(rdma).ok_or("no run")?, median(tcp).ok_or("no run")?);
    let us = |r: &Run| r.wall.as_secs_f64() * 1e6 / o.pings as f64;
    examples::outln!(
        "{:<28} {:>9.1} us   TcpStream {:.1} us   ratio {:.2}x",
        "byte stream ping-pong, 8 B",
        us(&rdma),
        us(&tcp),
        us(&rdma) / us(&tcp)
    );
    Ok(())
}
