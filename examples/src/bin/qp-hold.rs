//! `qp-hold`: opens many queue pairs and holds them idle, to measure what an idle queue
//! pair costs (scripts/daemon_scale.py runs ten of these against one iwarpd).
//!
//! ```text
//! qp-hold --daemon SOCK --listen 127.0.0.1:PORT -n 100     # accepts 100, then holds
//! qp-hold --daemon SOCK --connect 127.0.0.1:PORT -n 100    # connects 100, then holds
//! ```
//!
//! Each queue pair has its own completion queue and one receive posted, as an idle
//! application's would. `--regions R` also registers R regions of 4 KiB first. Once all
//! are connected it prints `ready N`, `regions R` and its resident set (`rss_kib K`),
//! then holds them until its standard input closes. Without `--daemon` (or
//! `IWARP_DEVICE`) the engine is embedded.

use std::io::BufRead as _;

use clap::Parser;
use verbs::{Access, Device, DeviceConfig, Qp, QpConfig, RecvWr};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Opens many queue pairs and holds them idle until standard input closes, printing
/// `ready N` and `rss_kib K` once all are connected.
#[derive(Debug, Parser)]
#[command(name = "qp-hold", version)]
struct Cli {
    /// Attach to the local iwarpd at SOCK instead of embedding the engine.
    #[arg(long, value_name = "SOCK")]
    daemon: Option<String>,
    /// Accept the queue pairs on ADDR.
    #[arg(
        long,
        value_name = "ADDR",
        required_unless_present = "connect",
        conflicts_with = "connect"
    )]
    listen: Option<String>,
    /// Connect the queue pairs to ADDR.
    #[arg(long, value_name = "ADDR")]
    connect: Option<String>,
    /// How many queue pairs.
    #[arg(short, default_value_t = 100)]
    n: usize,
    /// Also register and hold this many 4 KiB regions (what regions cost, or meeting
    /// iwarpd's limits).
    #[arg(long, default_value_t = 0)]
    regions: usize,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (none: standard iWARP only, which Wireshark decodes; through iwarpd, the
    /// daemon's setting applies).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = examples::args::extensions)]
    extensions: verbs::Extensions,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // Errors print as sentences (`qp-hold: ...`, exit status 1), not as Debug dumps.
    examples::run_on_worker("qp-hold", run(Cli::parse())).await;
}

async fn run(cli: Cli) -> Result<(), Error> {
    let Cli {
        daemon,
        listen,
        connect,
        n,
        regions,
        extensions,
    } = cli;
    let mut cfg = DeviceConfig::default().extensions(extensions);
    if let Some(d) = &daemon {
        cfg = cfg.daemon(d);
    }
    let device = Device::open(cfg)?;
    let pd = device.alloc_pd()?;
    let buf = pd.alloc_mr(64 * n.max(1), Access::LOCAL_WRITE)?;
    let held = (0..regions)
        .map(|_| pd.alloc_mr(4096, Access::LOCAL_WRITE))
        .collect::<Result<Vec<_>, _>>()?;
    let mut qps: Vec<(Qp, verbs::Cq)> = Vec::with_capacity(n);
    match (listen, connect) {
        (Some(addr), None) => {
            let l = device.listen(addr.as_str()).await?;
            examples::outln!("listening {}", l.local_addr());
            examples::stdio::flush();
            while qps.len() < n {
                let inc = l.accept().await?;
                let cq = device.create_cq(32);
                let qp = inc.accept(&pd, QpConfig::new(&cq), b"").await?;
                qps.push((qp, cq));
            }
        }
        (None, Some(addr)) => {
            for _ in 0..n {
                let cq = device.create_cq(32);
                let c = device
                    .connect(&pd, addr.as_str(), QpConfig::new(&cq), b"")
                    .await?;
                qps.push((c.qp, cq));
            }
        }
        _ => unreachable!("clap requires exactly one of --listen and --connect"),
    }
    for (i, (qp, _)) in qps.iter().enumerate() {
        qp.post_recv(RecvWr {
            wr_id: i as u64,
            sgl: [buf.try_local(64 * i..64 * (i + 1))?].into(),
        })?;
    }
    examples::outln!("ready {}", qps.len());
    examples::outln!("regions {}", held.len());
    examples::outln!("rss_kib {}", rss_kib());
    examples::stdio::flush();
    // Hold until stdin closes.
    tokio::task::spawn_blocking(|| for _ in std::io::stdin().lock().lines() {}).await?;
    Ok(())
}

/// This process's resident set, KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
