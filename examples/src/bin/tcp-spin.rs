//! `tcp-spin`: the honest TCP floor for a polling consumer. Plain TCP driven the way
//! `iwperf` drives its completion queue: non-blocking `send`/`recv` in a spin loop, so no
//! message pays a scheduler wake-up. The benchmark scripts measure it in the same run as
//! the stack and print every ratio against it.
//!
//! ```text
//! tcp-spin stream   [-p PORT] [-s 65536] [-D 5] [--json] [SERVER]   # bandwidth, Gbit/s
//! tcp-spin pingpong [-p PORT] [-s 14]    [-D 5] [--json] [SERVER]   # one-way latency, us
//! ```
//!
//! Without `SERVER` it listens for one connection (the server); with it, it connects and
//! measures. `stream`: the client sends `-s`-octet writes for `-D` seconds and the server
//! answers the octet count it received, so the rate is what arrived. `pingpong`: the client
//! sends `-s` octets, the server echoes them, and half of each round trip is one sample.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Test {
    /// One-way bulk transfer (bandwidth).
    Stream,
    /// Request and echo of one message at a time (latency).
    Pingpong,
}

/// Plain TCP with non-blocking send/recv in spin loops: the floor for a polling consumer.
#[derive(Parser)]
#[command(version)]
struct Opts {
    /// What to measure.
    #[arg(value_enum)]
    test: Test,
    /// The server to connect to; without it, listen for one client.
    server: Option<String>,
    /// TCP port.
    #[arg(short, long, default_value_t = 18515)]
    port: u16,
    /// Octets per write (stream) or per message (pingpong); default 65536 / 14.
    #[arg(short, long)]
    size: Option<usize>,
    /// Seconds to run.
    #[arg(short = 'D', long, default_value_t = 5)]
    duration: u64,
    /// Print one JSON object with the result.
    #[arg(long)]
    json: bool,
}

fn main() {
    let opts = Opts::parse();
    let size = opts.size.unwrap_or(match opts.test {
        Test::Stream => 65536,
        Test::Pingpong => 14,
    });
    if size == 0 {
        fail("-s must be at least 1 octet".into());
    }
    let result = match &opts.server {
        None => serve(&opts, size),
        Some(host) => client(&opts, host, size),
    };
    if let Err(e) = result {
        fail(e.to_string());
    }
}

fn fail(why: String) -> ! {
    eprintln!("tcp-spin: {why}");
    std::process::exit(1)
}

fn serve(opts: &Opts, size: usize) -> std::io::Result<()> {
    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, opts.port)).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot listen on port {}: {e} (choose another with -p)",
                opts.port
            ),
        )
    })?;
    let (mut sock, _) = listener.accept()?;
    prepare(&sock)?;
    match opts.test {
        Test::Stream => {
            let mut buf = vec![0u8; size.max(65536)];
            let mut total = 0u64;
            loop {
                match sock.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            send_all(&mut sock, &total.to_be_bytes())
        }
        Test::Pingpong => {
            let mut buf = vec![0u8; size];
            loop {
                if !recv_exact(&mut sock, &mut buf)? {
                    return Ok(());
                }
                send_all(&mut sock, &buf)?;
            }
        }
    }
}

fn client(opts: &Opts, host: &str, size: usize) -> std::io::Result<()> {
    let mut sock = TcpStream::connect((host, opts.port)).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot connect to {host}:{}: {e} (is `tcp-spin` listening there?)",
                opts.port
            ),
        )
    })?;
    prepare(&sock)?;
    let run = Duration::from_secs(opts.duration);
    match opts.test {
        Test::Stream => {
            let buf = vec![0x5au8; size];
            let start = Instant::now();
            while start.elapsed() < run {
                send_all(&mut sock, &buf)?;
            }
            sock.shutdown(std::net::Shutdown::Write)?;
            let mut answer = [0u8; 8];
            if !recv_exact(&mut sock, &mut answer)? {
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    "the server closed without its count",
                ));
            }
            let secs = start.elapsed().as_secs_f64();
            let gbits = u64::from_be_bytes(answer) as f64 * 8.0 / secs / 1e9;
            if opts.json {
                println!(
                    "{{\"test\":\"stream\",\"size\":{size},\"secs\":{secs:.3},\"gbits\":{gbits:.3}}}"
                );
            } else {
                println!("tcp-spin stream: {size}-octet writes, {gbits:.2} Gbit/s received");
            }
        }
        Test::Pingpong => {
            let mut msg = vec![0x5au8; size];
            let mut samples = Vec::with_capacity(1 << 20);
            let start = Instant::now();
            while start.elapsed() < run {
                let t = Instant::now();
                send_all(&mut sock, &msg)?;
                if !recv_exact(&mut sock, &mut msg)? {
                    return Err(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "the server closed mid-run",
                    ));
                }
                samples.push(t.elapsed().as_nanos() as f64 / 2000.0);
            }
            sock.shutdown(std::net::Shutdown::Both)?;
            samples.sort_by(f64::total_cmp);
            let median = samples[samples.len() / 2];
            let p99 = samples[samples.len() * 99 / 100];
            let n = samples.len();
            if opts.json {
                println!(
                    "{{\"test\":\"pingpong\",\"size\":{size},\"iters\":{n},\"median_us\":{median:.3},\"p99_us\":{p99:.3}}}"
                );
            } else {
                println!(
                    "tcp-spin pingpong: {size} octets, {n} round trips, one-way median {median:.2} us, p99 {p99:.2} us"
                );
            }
        }
    }
    Ok(())
}

fn prepare(sock: &TcpStream) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    sock.set_nonblocking(true)
}

/// Sends all of `buf`, spinning while the socket's buffer is full.
fn send_all(sock: &mut TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match sock.write(buf) {
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buf`, spinning while nothing has arrived; false on a clean end of stream before
/// the first octet.
fn recv_exact(sock: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match sock.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
