//! The README's first command: two embedded iWARP engines in one process over loopback.
//!
//! ```text
//! cargo run --release -p examples --bin demo -- [--size 64K] [--total 256M] [--depth 16] [--pings 1000] [--daemon PATH]
//! ```
//!
//! With `--daemon PATH` (or `IWARP_DEVICE=unix:PATH`) both sides attach to the local
//! `iwarpd` serving applications at PATH instead of embedding their engines: the same
//! code, run through the daemon.
//!
//! Steps, each printed as it happens: listen; register the server's target region; connect
//! (the client's private data says hello, the server's carries the target as a
//! `RemoteBuf`); RDMA Write `--total` octets in `--size` Writes with `--depth` outstanding;
//! RDMA Read it all back the same way and verify it; Send/Recv ping-pong; disconnect.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use examples::args::{Size, parse_size};
use verbs::{
    Access, Cq, Device, DeviceConfig, Listener, Mr, Payload, Pd, Qp, QpConfig, QpEnd, RecvWr,
    RemoteBuf, SendFlags, SendOp, SendWr, Srq,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Two embedded iWARP engines in one process over loopback (or two applications
/// through an iwarpd): RDMA Writes, Reads read back and verified, Send ping-pongs on a
/// shared receive queue, a graceful close. Sizes take K, M, G suffixes (binary).
#[derive(Parser, Debug)]
#[command(name = "demo", version)]
struct Opts {
    /// Octets per RDMA Write/Read.
    #[arg(long, value_name = "N", default_value = "64K", value_parser = size)]
    size: usize,
    /// Octets written, then read back.
    #[arg(long, value_name = "N", default_value = "256M", value_parser = size)]
    total: usize,
    /// Requests in flight.
    #[arg(long, value_name = "N", default_value = "16", value_parser = size)]
    depth: usize,
    /// Send/Recv round trips.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = size)]
    pings: usize,
    /// Both sides go through the iwarpd serving applications at PATH (start one with:
    /// iwarpd --control PATH); IWARP_DEVICE=unix:PATH does the same.
    #[arg(long, value_name = "PATH")]
    daemon: Option<String>,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (none: standard iWARP only, which Wireshark decodes; through iwarpd, the
    /// daemon's setting applies).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = examples::args::extensions)]
    extensions: verbs::Extensions,
}

fn size(text: &str) -> Result<usize, String> {
    parse_size(text).ok_or_else(|| format!("{text:?} is not a number (64K, 256M, 1000)"))
}

#[tokio::main]
async fn main() {
    let opts = Opts::parse();
    if opts.size == 0 || opts.total < opts.size || opts.total > u32::MAX as usize || opts.depth == 0
    {
        use clap::CommandFactory as _;
        Opts::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "need 0 < --size <= --total < 4G and --depth > 0",
            )
            .exit();
    }
    if let Err(e) = run(opts).await {
        examples::errln!("demo failed: {e}");
        std::process::exit(1);
    }
}

/// The demo's steps, each printed as it happens (see the module documentation).
async fn run(o: Opts) -> Result<(), Error> {
    let (server, client) = open_devices(&o)?;

    // ── server: listen, register the target, pre-post a receive for the pings ──
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    examples::outln!("[1] server listening on {}", listener.local_addr());
    let spd = server.alloc_pd()?;
    let target = spd.alloc_mr(o.total, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    examples::outln!(
        "[2] server registered a {} target region: STag {}, remote read/write",
        Size(o.total),
        target.stag()
    );
    let addr = listener.local_addr();
    let server_task = tokio::spawn(serve(listener, spd, target.remote()));

    // ── client: connect with private data ──
    let cpd = client.alloc_pd()?;
    let ccq = client.create_cq(o.depth.max(256) * 2);
    let hello = b"hello from the demo client";
    let conn = client
        .connect(&cpd, addr, QpConfig::new(&ccq), hello)
        .await?;
    let remote = RemoteBuf::decode(&conn.private_data).ok_or("server sent no RemoteBuf")?;
    let qp = conn.qp;
    let (ird, ord) = qp.ird_ord();
    examples::outln!(
        "[3] connected: {} in {:?}, IRD/ORD {ird}/{ord}; sent {:?} as private data, \
         got the target back as a {}-octet RemoteBuf {{ stag {}, to {:#x}, len {} }}",
        qp.num(),
        qp.state(),
        String::from_utf8_lossy(hello),
        conn.private_data.len(),
        remote.stag,
        remote.to,
        remote.len
    );

    // ── client: source data and read sink ──
    let source = Bytes::from(pattern(o.total));
    let sink = cpd.alloc_mr(o.total, Access::LOCAL_WRITE)?;
    examples::outln!(
        "[4] client registered a {} read sink: STag {}",
        Size(o.total),
        sink.stag()
    );

    // ── RDMA Write ──
    let started = Instant::now();
    let chunks = chunks(o.total, o.size);
    pipeline(&qp, &ccq, o.depth, &chunks, |off, len| SendOp::Write {
        data: Payload::Bytes(source.slice(off..off + len)),
        dst: remote.slice(off as u32, len as u32),
    })
    .await?;
    // Writes complete when the socket took them; a Read behind them proves placement.
    qp.read(remote.slice(0, 1), sink.local(..1)).await?;
    report(
        "[5] RDMA Write",
        o.total,
        o.size,
        o.depth,
        started.elapsed(),
    );

    // ── RDMA Read back, verify ──
    let started = Instant::now();
    pipeline(&qp, &ccq, o.depth, &chunks, |off, len| SendOp::Read {
        src: remote.slice(off as u32, len as u32),
        dst: sink.local(off..off + len),
    })
    .await?;
    report(
        "[6] RDMA Read ",
        o.total,
        o.size,
        o.depth,
        started.elapsed(),
    );
    verify(&sink, &source)?;
    examples::outln!(
        "[7] verified: all {} read back equal what was written",
        Size(o.total)
    );

    // ── Send/Recv ping-pong ──
    ping_pong(&qp, &cpd, o.pings).await?;

    // ── goodbye: an empty message ends the server's loop, then a graceful close ──
    qp.send(Bytes::new()).await?;
    qp.disconnect();
    let client_end = qp.closed().await;
    let (served, server_end) = server_task.await??;
    examples::outln!(
        "[9] disconnected: client {client_end}, server {server_end} (it answered {})",
        examples::words::count(served as u64, "ping", "pings")
    );
    Ok(())
}

/// The server's and the client's devices, embedded or through the iwarpd `o` names, and
/// the banner saying which.
fn open_devices(o: &Opts) -> Result<(Device, Device), Error> {
    let mut cfg = DeviceConfig::default()
        .queue_depths(o.depth.max(256), 256)
        .extensions(o.extensions);
    if let Some(path) = &o.daemon {
        cfg = cfg.daemon(path);
    }
    let server = Device::open(cfg.clone())?;
    let client = Device::open(cfg)?;
    match server.daemon_path() {
        None => {
            examples::outln!("iWARP demo: two embedded engines in one process, over loopback TCP")
        }
        Some(p) => examples::outln!(
            "iWARP demo: two applications' devices through the iwarpd at {}, over loopback TCP",
            p.display()
        ),
    }
    Ok((server, client))
}

/// The client's side of `pings` Send/Recv round trips on `qp`, each pong received into a
/// small region of `pd`'s; prints the first pong and the time per round trip.
async fn ping_pong(qp: &Qp, pd: &Pd, pings: usize) -> Result<(), Error> {
    let inbox = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    let started = Instant::now();
    for i in 0..pings {
        let ping = Bytes::from(format!("ping {i}"));
        // `join!` polls the receive first: it is posted before the ping goes out.
        let (pong, sent) = tokio::join!(qp.recv(&inbox), qp.send(ping));
        sent?;
        let pong = pong?;
        if i == 0 {
            let text = inbox.read(..pong.byte_len as usize)?;
            examples::outln!("    first pong: {:?}", String::from_utf8_lossy(&text));
        }
    }
    let rtt = started.elapsed() / pings.max(1) as u32;
    examples::outln!(
        "[8] Send/Recv: {} ping-pongs, {:.1} us per round trip",
        pings,
        rtt.as_secs_f64() * 1e6
    );
    Ok(())
}

/// The server's side: accept, answer pings with pongs until an empty message, then wait
/// for the close. Returns how many pings it answered and how its queue pair ended.
async fn serve(listener: Listener, pd: Pd, target: RemoteBuf) -> Result<(usize, QpEnd), Error> {
    let device = pd.device().clone();
    let (cq, srq) = (device.create_cq(64), device.create_srq(16)?);
    let inbox = pd.alloc_mr(64, Access::LOCAL_WRITE)?;
    // Posted before the connection exists, so the first ping always finds it.
    repost(&srq, &inbox)?;
    let incoming = listener.accept().await?;
    let qp = incoming
        .accept(&pd, QpConfig::new(&cq).srq(&srq), &target.encode())
        .await?;
    let mut answered = 0;
    loop {
        let wc = cq.next().await?;
        if !wc.wc.is_ok() {
            return Err(format!("server receive failed: {:?}", wc.wc.status).into());
        }
        if wc.wc.byte_len == 0 {
            break;
        }
        repost(&srq, &inbox)?;
        qp.send(Bytes::from(format!("pong {answered}"))).await?;
        answered += 1;
    }
    Ok((answered, qp.closed().await))
}

fn repost(srq: &Srq, inbox: &Mr) -> Result<(), Error> {
    srq.post_recv(RecvWr {
        wr_id: 0,
        sgl: [inbox.local(..)].into(),
    })?;
    Ok(())
}

/// `(offset, len)` of each request: `size` octets, the last one shorter if need be.
fn chunks(total: usize, size: usize) -> Vec<(usize, usize)> {
    (0..total)
        .step_by(size)
        .map(|off| (off, size.min(total - off)))
        .collect()
}

/// Posts one signaled request per chunk, keeping `depth` in flight, and waits for every
/// completion on `cq`. Requests go out in batches (one call, one wake-up of the
/// connection for all of them) and completions are taken as many as have arrived at
/// once, as an RDMA application keeps its pipeline full.
async fn pipeline(
    qp: &Qp,
    cq: &Cq,
    depth: usize,
    chunks: &[(usize, usize)],
    op: impl Fn(usize, usize) -> SendOp,
) -> Result<(), Error> {
    let (mut posted, mut done) = (0, 0);
    let mut wcs = Vec::with_capacity(depth);
    while done < chunks.len() {
        let room = depth - (posted - done);
        let batch = (posted..chunks.len()).take(room).map(|n| {
            let (off, len) = chunks[n];
            SendWr {
                wr_id: n as u64,
                op: op(off, len),
                flags: SendFlags::SIGNALED,
            }
        });
        let n = batch.len();
        if n > 0 {
            qp.post_send_batch(batch).map_err(|(_, e)| e)?;
            posted += n;
        }
        wcs.clear();
        wcs.push(cq.next().await?);
        cq.poll(&mut wcs, depth)?;
        for wc in &wcs {
            if !wc.wc.is_ok() {
                return Err(format!("request {} failed: {:?}", wc.wc.wr_id, wc.wc.status).into());
            }
        }
        done += wcs.len();
    }
    Ok(())
}

fn report(what: &str, total: usize, size: usize, depth: usize, took: Duration) {
    let secs = took.as_secs_f64().max(1e-9);
    examples::outln!(
        "{what}: {} in {} requests, {depth} in flight: {:.3} s, {:.0} MiB/s ({:.2} Gbit/s)",
        Size(total),
        Size(size),
        secs,
        total as f64 / secs / f64::from(1u32 << 20),
        total as f64 * 8.0 / secs / 1e9
    );
}

/// Compares the sink with the source, 1 MiB at a time.
fn verify(sink: &Mr, source: &[u8]) -> Result<(), Error> {
    let mut buf = vec![0; 1 << 20];
    for (i, want) in source.chunks(buf.len()).enumerate() {
        let got = &mut buf[..want.len()];
        sink.read_into(i << 20, got)?;
        if got != want {
            return Err(format!("read-back mismatch in MiB {i}").into());
        }
    }
    Ok(())
}

/// A pattern where every 8-octet word differs.
fn pattern(len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}
