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
//! | `RdmaStream` 64 KiB / 64 B writes, 8 B ping-pong | `TcpStream`, same code | - |
//!
//! `--smoke` runs everything for a moment (CI); `--total SIZE`, `--pings N`, `--qps N`
//! size the runs; `--only write,read,pingpong,qps` picks lines (for profiling one path).
//! `--window SIZE` is the memory each bandwidth run cycles through at both ends, for the
//! TCP pump and for the RDMA regions alike: 64 KiB by default (one buffer reused, as a
//! socket pump and perftest do), `--window 64M` for data that does not stay in the cache.
//! Numbers, not pass/fail: nothing here is a test.

mod pingpong;
mod stream;

use pingpong::{Msg, Wait};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use examples::args::{Size, parse_size};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use verbs::{
    Access, Cq, Device, DeviceConfig, Extensions, Mr, Payload, Qp, QpConfig, RemoteBuf, SendFlags,
    SendOp, SendWr,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

const MSG: usize = 64 * 1024;
/// Connections being set up at once in the QP scale line.
const SETUP_IN_FLIGHT: usize = 64;
const DEPTH: usize = 16;

struct Opts {
    total: usize,
    window: usize,
    pings: usize,
    qps: usize,
    rounds: usize,
    only: Vec<String>,
}

impl Opts {
    /// True when the line `name` runs (all of them without `--only`).
    fn runs(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

/// The lines `--only` can pick.
const LINES: [&str; 8] = [
    "qps", "write", "read", "pingpong", "ext", "reg", "migrate", "stream",
];

/// Measures this iWARP stack against raw TCP on the same loopback, in the same run, and
/// prints each ratio next to its target (numbers, not pass/fail). BENCHMARKS.md explains
/// the method and the results.
#[derive(Parser, Debug)]
#[command(name = "iwbench", version, max_term_width = 100)]
struct Cli {
    /// Comma-separated lines to run (default: all): qps, write, read, pingpong, ext
    /// (Read V2 against RFC 5040 Read, Send with Immediate Data against a Send plus RFC
    /// 7306 Immediate Data), reg (a queued registration against an ordinary one; through
    /// iwarpd with IWARP_DEVICE=unix:PATH), migrate (live migration between embedded
    /// devices), stream (RdmaStream against TcpStream).
    #[arg(long, value_name = "LINES", value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(LINES))]
    only: Vec<String>,
    /// Rounds per line, each run right after its TCP baseline; the median is printed
    /// [default: 3].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    rounds: Option<u64>,
    /// Octets per bandwidth run [default: 1G].
    #[arg(long, value_name = "SIZE", value_parser = size)]
    total: Option<usize>,
    /// Memory each bandwidth run cycles through, for the TCP pump and the RDMA regions
    /// alike: a multiple of 64K, up to 2G [default: 64K, one buffer reused].
    #[arg(long, value_name = "SIZE", value_parser = window)]
    window: Option<usize>,
    /// Round trips per ping-pong run [default: 20000].
    #[arg(long, value_name = "N")]
    pings: Option<usize>,
    /// Queue pairs connected in the setup line [default: 1000].
    #[arg(long, value_name = "N")]
    qps: Option<usize>,
    /// Everything for a moment (CI): the defaults become 8M, 200 pings, 20 QPs, 1 round.
    #[arg(long)]
    smoke: bool,
}

fn size(text: &str) -> Result<usize, String> {
    parse_size(text).ok_or_else(|| format!("{text:?} is not a size (64K, 1G)"))
}

fn window(text: &str) -> Result<usize, String> {
    parse_size(text)
        .filter(|&w| (MSG..=1 << 31).contains(&w) && w % MSG == 0)
        .ok_or_else(|| format!("{text:?}: a multiple of 64K, up to 2G"))
}

impl Cli {
    /// The run's settings: the flags, else the defaults (`--smoke`'s, or the full ones).
    fn opts(self) -> Opts {
        let (total, pings, qps, rounds) = if self.smoke {
            (8 << 20, 200, 20, 1)
        } else {
            (1 << 30, 20_000, 1000, 3)
        };
        Opts {
            total: self.total.unwrap_or(total),
            window: self.window.unwrap_or(MSG),
            pings: self.pings.unwrap_or(pings),
            qps: self.qps.unwrap_or(qps),
            rounds: self.rounds.map_or(rounds, |r| r as usize),
            only: self.only,
        }
    }
}

#[tokio::main]
async fn main() {
    let o = Cli::parse().opts();
    examples::run_on_worker("iwbench", async move { run(&o).await }).await;
}

async fn run(o: &Opts) -> Result<(), Error> {
    examples::outln!(
        "iwbench: loopback, {} per bandwidth run in {} messages ({DEPTH} in flight) over a {} window, {} ping-pongs;",
        Size(o.total),
        Size(MSG),
        Size(o.window),
        o.pings
    );
    examples::outln!(
        "  each line is the median of {}, run alternately with its TCP baseline",
        examples::words::count(o.rounds as u64, "round", "rounds")
    );
    // First, while the heap is fresh, so the memory per QP is not hidden by reuse.
    if o.runs("qps") {
        qp_scale(o.qps).await?;
    }
    if o.runs("write") || o.runs("read") {
        let mut runs: [Vec<Run>; 4] = Default::default();
        for _ in 0..o.rounds {
            runs[0].push(tcp_stream(o.total, o.window).await?);
            if o.runs("write") {
                runs[1].push(rdma_bw(o.total, o.window, true, Op::Write, Extensions::ALL).await?);
                runs[2].push(rdma_bw(o.total, o.window, false, Op::Write, Extensions::ALL).await?);
            }
            if o.runs("read") {
                runs[3].push(rdma_bw(o.total, o.window, true, Op::Read, Extensions::ALL).await?);
            }
        }
        let [tcp, w_crc, w_plain, read] = runs.map(median);
        let gib = o.total as f64 / f64::from(1u32 << 30);
        let tcp = tcp.ok_or("no TCP run")?;
        bw_line("TCP stream (baseline)", &tcp, gib, None);
        let lines = [
            ("RDMA Write, CRC on", w_crc, 0.8),
            ("RDMA Write, CRC off", w_plain, 0.9),
            ("RDMA Read, CRC on", read, 0.75),
        ];
        for (what, run, target) in lines {
            if let Some(run) = run {
                bw_line(what, &run, gib, Some((&tcp, target)));
            }
        }
    }
    if o.runs("pingpong") {
        let (mut tcp, mut rdma) = (Vec::new(), Vec::new());
        let (mut tcp_spin, mut rdma_spin) = (Vec::new(), Vec::new());
        for _ in 0..o.rounds {
            tcp.push(pingpong::tcp(o.pings, Wait::Await).await?);
            rdma.push(pingpong::rdma(o.pings, Wait::Await, Msg::Send).await?);
            tcp_spin.push(pingpong::tcp(o.pings, Wait::Spin).await?);
            rdma_spin.push(pingpong::rdma(o.pings, Wait::Spin, Msg::Send).await?);
        }
        let median = |runs| median(runs).ok_or("no run");
        let target = "(target <= 1.3x)";
        pingpong_line(
            "Send ping-pong, 8 octets",
            o,
            &median(rdma)?,
            &median(tcp)?,
            target,
        );
        let what = "  both ends busy-polling";
        let (rdma, tcp) = (median(rdma_spin)?, median(tcp_spin)?);
        pingpong_line(what, o, &rdma, &tcp, "(poll_input + Cq::poll)");
    }
    if o.runs("ext") {
        extensions(o).await?;
    }
    if o.runs("reg") {
        registration(o).await?;
    }
    if o.runs("migrate") {
        migration(o).await?;
    }
    if o.runs("stream") {
        stream::compare(o).await?;
    }
    Ok(())
}

/// This stack's extensions against what they replace, in alternating rounds: Read V2
/// against RFC 5040 Read (64 KiB, CRC on), and the busy-polled 8-octet ping-pong carrying
/// a value as one Send with Immediate Data against a Send plus Immediate Data.
async fn extensions(o: &Opts) -> Result<(), Error> {
    let v1 = Extensions::SEND_IMMEDIATE;
    let (mut v2_runs, mut v1_runs) = (Vec::new(), Vec::new());
    let (mut imm, mut two) = (Vec::new(), Vec::new());
    for _ in 0..o.rounds {
        v2_runs.push(rdma_bw(o.total, o.window, true, Op::Read, Extensions::ALL).await?);
        v1_runs.push(rdma_bw(o.total, o.window, true, Op::Read, v1).await?);
        imm.push(pingpong::rdma(o.pings, Wait::Spin, Msg::SendImm).await?);
        two.push(pingpong::rdma(o.pings, Wait::Spin, Msg::SendThenImmediate).await?);
    }
    let gib = o.total as f64 / f64::from(1u32 << 30);
    let (v2, v1) = (
        median(v2_runs).ok_or("no run")?,
        median(v1_runs).ok_or("no run")?,
    );
    bw_line("RDMA Read (RFC 5040)", &v1, gib, None);
    let gbit = gib * f64::from(1u32 << 30) * 8.0 / 1e9 / v2.wall.as_secs_f64().max(1e-9);
    examples::outln!(
        "{:<28} {gbit:>9.2} Gbit/s   ratio to RFC 5040 Read {:.2}x",
        "RDMA Read V2, CRC on",
        v1.wall.as_secs_f64() / v2.wall.as_secs_f64().max(1e-9),
    );
    let (imm, two) = (median(imm).ok_or("no run")?, median(two).ok_or("no run")?);
    let us = |r: &Run| r.wall.as_secs_f64() * 1e6 / o.pings as f64;
    examples::outln!(
        "{:<28} {:>9.1} us   Send + Immediate Data {:.1} us   ratio {:.2}x  (busy-polling)",
        "Send with Immediate Data",
        us(&imm),
        us(&two),
        us(&imm) / us(&two),
    );
    Ok(())
}

/// Registering 64 KiB and writing it to the peer at once, over and over: an ordinary
/// registration (done before the Write is posted) against one through the control queue
/// (the Write posted at once, held until the registration is done). Through iwarpd
/// (`IWARP_DEVICE=unix:PATH`) the second saves the control round trip.
async fn registration(o: &Opts) -> Result<(), Error> {
    const LEN: usize = 64 << 10;
    const N: usize = 200;
    let (qp, _cq, remote, _sink, client) = connected(true, LEN, Extensions::ALL).await?;
    let pd = qp.pd().clone();
    let dst = remote.slice(0, LEN as u32);
    let (mut plain, mut queued) = (Vec::new(), Vec::new());
    for _ in 0..o.rounds {
        for (queue, runs) in [(false, &mut plain), (true, &mut queued)] {
            let meter = Meter::start();
            for _ in 0..N {
                let mr = match queue {
                    false => pd.alloc_mr(LEN, Access::LOCAL_WRITE)?,
                    true => pd.alloc_mr_queued(LEN, Access::LOCAL_WRITE)?,
                };
                let from = Payload::Sgl(mr.local(..).into());
                qp.exec(SendOp::Write { data: from, dst }, SendFlags::NONE)
                    .await?;
            }
            runs.push(meter.stop());
        }
    }
    let us = |r: &Run| r.wall.as_secs_f64() * 1e6 / N as f64;
    let (plain, queued) = (
        median(plain).ok_or("no run")?,
        median(queued).ok_or("no run")?,
    );
    let mode = if client.daemon_path().is_some() {
        "through iwarpd"
    } else {
        "embedded"
    };
    examples::outln!(
        "{:<28} {:>9.1} us   registered first {:.1} us   ratio {:.2}x  ({mode})",
        "register 64 KiB + Write, queued",
        us(&queued),
        us(&plain),
        us(&queued) / us(&plain),
    );
    Ok(())
}

/// Live migration: a protection domain with a connected queue pair moved between two
/// embedded devices, back and forth, with a Write through it after every move.
async fn migration(o: &Opts) -> Result<(), Error> {
    const MOVES: usize = 100;
    let (qp, _cq, remote, _sink, client) = connected(true, 4096, Extensions::ALL).await?;
    if client.daemon_path().is_some() {
        return Ok(());
    }
    let other = Device::open(DeviceConfig::default())?;
    let pd = qp.pd().clone();
    let mut runs = Vec::new();
    for _ in 0..o.rounds {
        let meter = Meter::start();
        for i in 0..MOVES {
            let to = if i % 2 == 0 { &other } else { &client };
            pd.migrate(to).await?;
            qp.write(Bytes::from_static(b"moved"), remote.slice(0, 5))
                .await?;
        }
        runs.push(meter.stop());
    }
    let run = median(runs).ok_or("no run")?;
    examples::outln!(
        "{:<28} {:>9.1} us per move, a Write through it after each",
        "live migration of a domain",
        run.wall.as_secs_f64() * 1e6 / MOVES as f64,
    );
    Ok(())
}

/// Prints a ping-pong line: the stack's round trip, the TCP baseline's, and the ratio.
fn pingpong_line(what: &str, o: &Opts, rdma: &Run, tcp: &Run, note: &str) {
    let n = o.pings as f64;
    let us = |d: Duration| d.as_secs_f64() * 1e6 / n;
    examples::outln!(
        "{what:<28} {:>9.1} us   {}   TCP {:.1} us, {}   ratio {:.2}x  {note}{}",
        us(rdma.wall),
        cpu_text(rdma.cpu.map(us), "us"),
        us(tcp.wall),
        cpu_text(tcp.cpu.map(us), "us"),
        rdma.wall.as_secs_f64() / tcp.wall.as_secs_f64(),
        cpu_ratio(rdma, tcp),
    );
}

/// The median wall time and the median CPU time of `runs` (each on its own), or `None`
/// when there are none.
fn median(mut runs: Vec<Run>) -> Option<Run> {
    let mid = runs.len().checked_sub(1)? / 2;
    let mut cpus: Option<Vec<Duration>> = runs.iter().map(|r| r.cpu).collect();
    runs.sort_by_key(|r| r.wall);
    Some(Run {
        wall: runs[mid].wall,
        cpu: cpus.as_mut().map(|c| {
            c.sort();
            c[mid]
        }),
    })
}

/// One timed run: wall-clock time and the CPU time all of this process's threads used
/// meanwhile (both ends of the loopback run here, so it is the whole cost).
struct Run {
    wall: Duration,
    cpu: Option<Duration>,
}

/// Starts timing a [`Run`].
struct Meter {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Meter {
    fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: cpu_time(),
        }
    }

    fn stop(self) -> Run {
        Run {
            wall: self.wall.elapsed(),
            cpu: cpu_time()
                .zip(self.cpu)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

/// The CPU time every thread of this process has run so far (the first field of each
/// `/proc/self/task/*/schedstat`, in nanoseconds). CPU time is steadier than wall time on
/// a busy machine, so it is printed next to it.
fn cpu_time() -> Option<Duration> {
    let mut ns = 0u64;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(ns))
}

fn cpu_text(v: Option<f64>, unit: &str) -> String {
    v.map_or_else(|| "cpu ?".into(), |v| format!("cpu {v:.2} {unit}"))
}

/// `, cpu N.NNx` when both runs have a CPU time.
fn cpu_ratio(a: &Run, b: &Run) -> String {
    match (a.cpu, b.cpu) {
        (Some(a), Some(b)) if !b.is_zero() => {
            format!("   cpu {:.2}x", a.as_secs_f64() / b.as_secs_f64())
        }
        _ => String::new(),
    }
}

/// Prints a bandwidth line (`gib` GiB moved): rate, CPU seconds per GiB and, with a
/// baseline, the ratio against its target.
fn bw_line(what: &str, run: &Run, gib: f64, baseline: Option<(&Run, f64)>) {
    let gbit = gib * f64::from(1u32 << 30) * 8.0 / 1e9 / run.wall.as_secs_f64().max(1e-9);
    let cpu = cpu_text(run.cpu.map(|c| c.as_secs_f64() / gib), "s/GiB");
    match baseline {
        None => examples::outln!("{what:<28} {gbit:>9.2} Gbit/s   {cpu}"),
        Some((base, target)) => examples::outln!(
            "{what:<28} {gbit:>9.2} Gbit/s   {cpu}   ratio {:.2}x  (target >= {target}x){}",
            base.wall.as_secs_f64() / run.wall.as_secs_f64().max(1e-9),
            cpu_ratio(run, base),
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

/// Raw TCP: one side writes `total` octets in 64 KiB writes from a `window`-octet buffer,
/// the other reads them into another, each cycling through its buffer.
async fn tcp_stream(total: usize, window: usize) -> Result<Run, Error> {
    let (mut tx, mut rx) = tcp_pair().await?;
    let src = vec![7u8; window];
    let meter = Meter::start();
    let reader = tokio::spawn(async move {
        let mut sink = vec![0u8; window];
        let mut got = 0;
        while got < total {
            let at = got % window;
            got += rx.read(&mut sink[at..(at + MSG).min(window)]).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    for off in (0..total).step_by(MSG) {
        let at = off % window;
        let len = MSG.min(total - off).min(window - at);
        tx.write_all(&src[at..at + len]).await?;
    }
    reader.await??;
    Ok(meter.stop())
}

/// Two devices, connected; the server exposes `len` octets and sends their RemoteBuf.
async fn connected(
    crc: bool,
    len: usize,
    ext: Extensions,
) -> Result<(Qp, Cq, RemoteBuf, Mr, Device), Error> {
    let cfg = DeviceConfig::default()
        .crc(crc)
        .queue_depths(256, 256)
        .extensions(ext);
    let (server, client) = (Device::open(cfg.clone())?, Device::open(cfg)?);
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let spd = server.alloc_pd()?;
    let target = spd.alloc_mr(len, Access::REMOTE_WRITE | Access::REMOTE_READ)?;
    let token = target.remote().encode();
    let scq = server.create_cq(64);
    tokio::spawn(async move {
        if let Ok(inc) = listener.accept().await
            && let Ok(qp) = inc.accept(&spd, QpConfig::new(&scq), &token).await
        {
            let _keep = (target, scq);
            qp.closed().await;
        }
    });
    let cpd = client.alloc_pd()?;
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

/// RDMA Write or Read of `total` octets in 64 KiB requests, 16 in flight, cycling through
/// `window` octets of the peer's region (and, for Reads, of our own sink); Writes send
/// from one 64 KiB buffer of `window`.
async fn rdma_bw(
    total: usize,
    window: usize,
    crc: bool,
    op: Op,
    ext: Extensions,
) -> Result<Run, Error> {
    let (qp, cq, remote, sink, _client) = connected(crc, window, ext).await?;
    let data = Bytes::from(vec![0x5au8; window]);
    let n = total.div_ceil(MSG);
    let meter = Meter::start();
    let (mut posted, mut done) = (0usize, 0usize);
    while done < n {
        while posted < n && posted - done < DEPTH {
            let off = (posted * MSG) % window;
            let len = MSG.min(window - off) as u32;
            let op = match op {
                Op::Write => SendOp::Write {
                    data: Payload::Bytes(data.slice(off..off + len as usize)),
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
    let run = meter.stop();
    qp.disconnect();
    Ok(run)
}

/// Connects `n` queue pairs between two devices, [`SETUP_IN_FLIGHT`] at a time; reports
/// the setup rate and the memory each idle queue pair costs (resident set growth over all
/// of them, and the kernel's TCP buffers).
async fn qp_scale(n: usize) -> Result<(), Error> {
    let cfg = DeviceConfig::default();
    let (server, client) = (Device::open(cfg.clone())?, Device::open(cfg)?);
    let listener = server.listen(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let addr = listener.local_addr();
    let (spd, scq) = (server.alloc_pd()?, server.create_cq(64));
    let acceptor = tokio::spawn(async move {
        // Each MPA exchange in its own task, as a server would run them.
        let mut accepting = JoinSet::new();
        for _ in 0..n {
            let inc = listener.accept().await?;
            let (spd, scq) = (spd.clone(), scq.clone());
            accepting.spawn(async move { inc.accept(&spd, QpConfig::new(&scq), b"").await });
        }
        let mut qps = Vec::with_capacity(n);
        while let Some(qp) = accepting.join_next().await {
            qps.push(qp??);
        }
        Ok::<_, Error>(qps)
    });
    let (cpd, ccq) = (client.alloc_pd()?, client.create_cq(64));
    let (before, kernel_before) = (rss_kib(), tcp_kernel_kib());
    let started = Instant::now();
    let mut qps = Vec::with_capacity(n);
    let mut connecting = JoinSet::new();
    for i in 0..n {
        if i >= SETUP_IN_FLIGHT
            && let Some(qp) = connecting.join_next().await
        {
            qps.push(qp??);
        }
        let (client, cpd, ccq) = (client.clone(), cpd.clone(), ccq.clone());
        connecting.spawn(async move {
            let conn = client.connect(&cpd, addr, QpConfig::new(&ccq), b"");
            conn.await.map(|c| c.qp)
        });
    }
    while let Some(qp) = connecting.join_next().await {
        qps.push(qp??);
    }
    let server_qps = acceptor.await??;
    let took = started.elapsed();
    let per_qp = |before: Option<u64>, after: Option<u64>| match (before, after) {
        (Some(b), Some(a)) => format!("{:.1} KiB", a.saturating_sub(b) as f64 / (2 * n) as f64),
        _ => "unknown (no /proc)".into(),
    };
    let user = per_qp(before, rss_kib());
    let kernel = per_qp(kernel_before, tcp_kernel_kib());
    examples::outln!(
        "{:<28} {:>9.0} /s   {n} pairs in {:.2} s; memory per idle QP {user} (target <= 64 KiB), \
         kernel TCP buffers {kernel}",
        "QP setup (both sides)",
        n as f64 / took.as_secs_f64(),
        took.as_secs_f64()
    );
    drop((qps, server_qps));
    Ok(())
}

/// The memory the kernel holds for TCP socket buffers, from `/proc/net/sockstat`
/// (`TCP: ... mem PAGES`, machine-wide).
fn tcp_kernel_kib() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    words.find(|w| *w == "mem")?;
    Some(words.next()?.parse::<u64>().ok()? * 4)
}

/// The resident set size of this process, from /proc/self/status.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
