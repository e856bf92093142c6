//! `iwbench`: our stack against the limit of this machine, measured in the same run.
//!
//! Each line pairs an iWARP measurement with a raw-TCP baseline taken seconds earlier on
//! the same loopback, and prints the ratio next to the target it is held to:
//!
//! | line | baseline | target |
//! | --- | --- | --- |
//! | RDMA Write 64 KiB, CRC on / off | TCP stream, 64 KiB writes | >= 0.8x / 0.9x |
//! | RDMA Read 64 KiB | TCP stream | >= 0.75x |
//! | Send ping-pong, 8 octets | TCP ping-pong, 8 octets | <= 1.3x the round trip |
//! | 1,000 connected queue pairs | - | setup rate; <= 64 KiB per idle QP |
//!
//! `--smoke` runs everything for a moment (CI); `--total SIZE`, `--pings N`, `--qps N`
//! size the runs. Numbers, not pass/fail: nothing here is a test.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use examples::args::{ArgError, Size, flags, parse_size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use verbs::{
    Access, Cq, Device, DeviceConfig, Mr, Payload, Qp, QpConfig, RecvWr, RemoteBuf, SendFlags,
    SendOp, SendWr,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

const MSG: usize = 64 * 1024;
const DEPTH: usize = 16;

struct Opts {
    total: usize,
    pings: usize,
    qps: usize,
}

fn parse() -> Result<Opts, ArgError> {
    let mut o = Opts {
        total: 1 << 30,
        pings: 20_000,
        qps: 1000,
    };
    let (smoke, rest): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| a == "--smoke");
    if !smoke.is_empty() {
        o.total = 8 << 20;
        o.pings = 200;
        o.qps = 20;
    }
    for (k, v) in flags(rest)? {
        let bad = || ArgError(format!("bad value {v:?} for --{k}"));
        match k.as_str() {
            "total" => o.total = parse_size(&v).ok_or_else(bad)?,
            "pings" => o.pings = v.parse().map_err(|_| bad())?,
            "qps" => o.qps = v.parse().map_err(|_| bad())?,
            _ => {
                return Err(ArgError(format!(
                    "unknown flag --{k} (try --smoke, --total, --pings, --qps)"
                )));
            }
        }
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("iwbench: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o).await {
        eprintln!("iwbench: {e}");
        std::process::exit(1);
    }
}

async fn run(o: &Opts) -> Result<(), Error> {
    println!(
        "iwbench: loopback, {} per bandwidth run in {} messages ({DEPTH} in flight), {} ping-pongs",
        Size(o.total),
        Size(MSG),
        o.pings
    );
    let tcp_bw = tcp_stream(o.total).await?;
    line("TCP stream (baseline)", tcp_bw, None);
    let w_crc = rdma_bw(o.total, true, Op::Write).await?;
    line("RDMA Write, CRC on", w_crc, Some((tcp_bw, 0.8)));
    let w_plain = rdma_bw(o.total, false, Op::Write).await?;
    line("RDMA Write, CRC off", w_plain, Some((tcp_bw, 0.9)));
    let r = rdma_bw(o.total, true, Op::Read).await?;
    line("RDMA Read, CRC on", r, Some((tcp_bw, 0.75)));

    let tcp_rtt = tcp_pingpong(o.pings).await?;
    let rdma_rtt = send_pingpong(o.pings).await?;
    let ratio = rdma_rtt.as_secs_f64() / tcp_rtt.as_secs_f64();
    println!(
        "{:<28} {:>9.1} us   TCP {:>7.1} us   ratio {ratio:.2}x  (target <= 1.3x)",
        "Send ping-pong, 8 octets",
        rdma_rtt.as_secs_f64() * 1e6,
        tcp_rtt.as_secs_f64() * 1e6
    );
    qp_scale(o.qps).await
}

/// Prints a bandwidth line and, with a baseline, the ratio against its target.
fn line(what: &str, bytes_per_sec: f64, baseline: Option<(f64, f64)>) {
    let gbit = bytes_per_sec * 8.0 / 1e9;
    match baseline {
        None => println!("{what:<28} {gbit:>9.2} Gbit/s"),
        Some((base, target)) => println!(
            "{what:<28} {gbit:>9.2} Gbit/s   ratio {:.2}x  (target >= {target}x)",
            bytes_per_sec / base
        ),
    }
}

async fn tcp_pair() -> Result<(TcpStream, TcpStream), Error> {
    let l = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let (a, b) = tokio::join!(TcpStream::connect(l.local_addr()?), l.accept());
    let (a, (b, _)) = (a?, b?);
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    Ok((a, b))
}

/// Raw TCP: one side writes `total` octets in 64 KiB writes, the other reads them.
async fn tcp_stream(total: usize) -> Result<f64, Error> {
    let (mut tx, mut rx) = tcp_pair().await?;
    let buf = vec![7u8; MSG];
    let started = Instant::now();
    let reader = tokio::spawn(async move {
        let mut sink = vec![0u8; MSG];
        let mut got = 0;
        while got < total {
            got += rx.read(&mut sink).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    for off in (0..total).step_by(MSG) {
        tx.write_all(&buf[..MSG.min(total - off)]).await?;
    }
    reader.await??;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Raw TCP ping-pong of 8 octets; returns the mean round trip.
async fn tcp_pingpong(n: usize) -> Result<Duration, Error> {
    let (mut a, mut b) = tcp_pair().await?;
    let echo = tokio::spawn(async move {
        let mut m = [0u8; 8];
        for _ in 0..n {
            b.read_exact(&mut m).await?;
            b.write_all(&m).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let mut m = [1u8; 8];
    let started = Instant::now();
    for _ in 0..n {
        a.write_all(&m).await?;
        a.read_exact(&mut m).await?;
    }
    let took = started.elapsed();
    echo.await??;
    Ok(took / n.max(1) as u32)
}

/// Two devices, connected; the server exposes `len` octets and sends their RemoteBuf.
async fn connected(crc: bool, len: usize) -> Result<(Qp, Cq, RemoteBuf, Mr, Device), Error> {
    let cfg = DeviceConfig::default().crc(crc).queue_depths(256, 256);
    let (server, client) = (Device::open(cfg.clone()), Device::open(cfg));
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let spd = server.alloc_pd();
    let target = spd.alloc_mr(len, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    let token = target.remote().encode();
    let scq = server.create_cq(64);
    tokio::spawn(async move {
        if let Ok(inc) = listener.accept().await {
            if let Ok(qp) = inc.accept(&spd, QpConfig::new(&scq), &token).await {
                let _keep = (target, scq);
                qp.closed().await;
            }
        }
    });
    let cpd = client.alloc_pd();
    let cq = client.create_cq(1024);
    let conn = client.connect(&cpd, addr, QpConfig::new(&cq), b"").await?;
    let remote = RemoteBuf::decode(&conn.private_data).ok_or("no RemoteBuf from the server")?;
    let sink = cpd.alloc_mr(len, Access::LOCAL_WRITE)?;
    Ok((conn.qp, cq, remote, sink, client))
}

#[derive(Copy, Clone)]
enum Op {
    Write,
    Read,
}

/// RDMA Write or Read of `total` octets in 64 KiB requests, 16 in flight, into a 64 MiB
/// window that is reused.
async fn rdma_bw(total: usize, crc: bool, op: Op) -> Result<f64, Error> {
    let window = total.min(64 << 20);
    let (qp, cq, remote, sink, _client) = connected(crc, window).await?;
    let data = Bytes::from(vec![0x5au8; MSG]);
    let n = total.div_ceil(MSG);
    let started = Instant::now();
    let (mut posted, mut done) = (0usize, 0usize);
    while done < n {
        while posted < n && posted - done < DEPTH {
            let off = (posted * MSG) % window;
            let len = MSG.min(window - off) as u32;
            let op = match op {
                Op::Write => SendOp::Write {
                    data: Payload::Bytes(data.slice(..len as usize)),
                    dst: remote.slice(off as u32, len),
                },
                Op::Read => SendOp::Read {
                    src: remote.slice(off as u32, len),
                    dst: sink.local(off..off + len as usize),
                },
            };
            qp.post_send(SendWr {
                wr_id: posted as u64,
                op,
                flags: SendFlags::SIGNALED,
            })?;
            posted += 1;
        }
        let wc = cq.next().await?;
        if !wc.wc.is_ok() {
            return Err(format!("request failed: {:?}", wc.wc.status).into());
        }
        done += 1;
    }
    // Writes complete at the socket: a 1-octet Read behind them proves placement.
    qp.read(remote.slice(0, 1), sink.local(..1)).await?;
    let rate = total as f64 / started.elapsed().as_secs_f64();
    qp.disconnect();
    Ok(rate)
}

/// Send/Recv ping-pong of 8 octets between two devices; returns the mean round trip.
async fn send_pingpong(n: usize) -> Result<Duration, Error> {
    let cfg = DeviceConfig::default();
    let (server, client) = (Device::open(cfg.clone()), Device::open(cfg));
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let spd = server.alloc_pd();
    let echo = tokio::spawn(async move {
        let inbox = spd.alloc_mr(8, Access::LOCAL_WRITE)?;
        let cq = spd.device().create_cq(64);
        let first = RecvWr {
            wr_id: 0,
            sgl: vec![inbox.local(..)],
        };
        let qp = listener
            .accept()
            .await?
            .accept(&spd, QpConfig::new(&cq).recv(first), b"")
            .await?;
        for i in 0..n {
            let wc = cq.next().await?;
            if !wc.wc.is_ok() {
                return Err::<(), Error>(format!("echo receive: {:?}", wc.wc.status).into());
            }
            if i + 1 < n {
                qp.post_recv(RecvWr {
                    wr_id: 0,
                    sgl: vec![inbox.local(..)],
                })?;
            }
            qp.send(Bytes::from_static(b"pongpong")).await?;
        }
        Ok(())
    });
    let cpd = client.alloc_pd();
    let cq = client.create_cq(64);
    let qp = client
        .connect(&cpd, addr, QpConfig::new(&cq), b"")
        .await?
        .qp;
    let inbox = cpd.alloc_mr(8, Access::LOCAL_WRITE)?;
    let ping = Bytes::from_static(b"pingping");
    let started = Instant::now();
    for _ in 0..n {
        let (pong, sent) = tokio::join!(qp.recv(&inbox), qp.send(ping.clone()));
        sent?;
        pong?;
    }
    let took = started.elapsed();
    echo.await??;
    qp.disconnect();
    Ok(took / n.max(1) as u32)
}

/// Connects `n` queue pairs between two devices; reports the setup rate and the memory
/// each idle queue pair costs (resident set growth over all of them).
async fn qp_scale(n: usize) -> Result<(), Error> {
    let cfg = DeviceConfig::default();
    let (server, client) = (Device::open(cfg.clone()), Device::open(cfg));
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let (spd, scq) = (server.alloc_pd(), server.create_cq(64));
    let acceptor = tokio::spawn(async move {
        let mut qps = Vec::with_capacity(n);
        for _ in 0..n {
            let inc = listener.accept().await?;
            qps.push(inc.accept(&spd, QpConfig::new(&scq), b"").await?);
        }
        Ok::<_, Error>(qps)
    });
    let (cpd, ccq) = (client.alloc_pd(), client.create_cq(64));
    let before = rss_kib();
    let started = Instant::now();
    let mut qps = Vec::with_capacity(n);
    for _ in 0..n {
        qps.push(
            client
                .connect(&cpd, addr, QpConfig::new(&ccq), b"")
                .await?
                .qp,
        );
    }
    let server_qps = acceptor.await??;
    let took = started.elapsed();
    let per_qp = match (before, rss_kib()) {
        (Some(b), Some(a)) => format!("{:.1} KiB", a.saturating_sub(b) as f64 / (2 * n) as f64),
        _ => "unknown (no /proc/self/status)".into(),
    };
    println!(
        "{:<28} {:>9.0} /s   {n} pairs in {:.2} s; memory per idle QP {per_qp} (target <= 64 KiB)",
        "QP setup (both sides)",
        n as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
    drop((qps, server_qps));
    Ok(())
}

/// The resident set size of this process, from /proc/self/status.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
