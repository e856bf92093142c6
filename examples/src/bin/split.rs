//! `split`: seed 002's push-push messaging protocol between two sides of a split driver,
//! over iWARP (see [`examples::split`] for the protocol).
//!
//! `split` runs both sides in this process over 127.0.0.1; `split --serve` and
//! `split HOST` run one side each on two hosts. `split --help` for the options.

use std::net::{SocketAddr, ToSocketAddrs};

use clap::Parser;

use examples::split::{self, DEFAULT_PORT};
use examples::{Error, verbs};

/// seed 002's push-push messaging (split driver) over iWARP: each side advertises three
/// buffer pools, then pushes N messages of mixed sizes (1 B to 96 KiB) into the other's
/// pools by RDMA Write plus an indication (immediate data, or a BufferRDMAIndicate message
/// for the 96 KiB pool), under element and receive credits; halfway through each side
/// flushes its 4 KiB pool. Every octet is verified. Without --serve or HOST both sides run
/// in this process over 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "split", version)]
struct Cli {
    /// Run the side that connects, to HOST[:PORT] (default port 7475).
    #[arg(value_name = "HOST[:PORT]", conflicts_with = "serve")]
    peer: Option<String>,
    /// Run the side that waits, on ADDR (default [::]:7475, IPv6 and IPv4 alike).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "[::]:7475")]
    serve: Option<String>,
    /// Messages each side pushes.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 1000)]
    count: u64,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (none: standard iWARP only, which Wireshark decodes; through iwarpd, the
    /// daemon's setting applies).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = examples::args::extensions)]
    extensions: verbs::Extensions,
}

/// Which side or sides run here.
enum Mode {
    Loopback,
    Serve(SocketAddr),
    Connect(SocketAddr),
}

/// `HOST[:PORT]` (port [`DEFAULT_PORT`] when left out) as a socket address.
fn resolve(text: &str) -> Result<SocketAddr, String> {
    let with_port = match text.parse::<SocketAddr>() {
        Ok(a) => return Ok(a),
        Err(_)
            if text
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok()) =>
        {
            text.to_owned()
        }
        Err(_) => format!("{text}:{DEFAULT_PORT}"),
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {text:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{text:?} resolves to no address"))
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    // Errors print as sentences (`split: ...`, exit status 1), not as Debug dumps.
    examples::run_on_worker("split", run(cli)).await;
}

async fn run(cli: Cli) -> Result<(), Error> {
    let count = cli.count;
    let mode = match (cli.serve, cli.peer) {
        (Some(at), _) => Mode::Serve(resolve(&at)?),
        (None, Some(peer)) => Mode::Connect(resolve(&peer)?),
        (None, None) => Mode::Loopback,
    };
    let cfg = verbs::DeviceConfig::default().extensions(cli.extensions);
    let device = || verbs::Device::open(cfg.clone());
    match mode {
        Mode::Loopback => {
            let (a, b) = split::loopback(&cfg, count).await?;
            split::print_summary("side A", &a);
            split::print_summary("side B", &b);
        }
        Mode::Serve(at) => {
            let dev = device()?;
            let listener = dev.listen(at).await.map_err(|e| {
                format!("cannot listen on {at}: {e}; pick another address with --serve ADDR")
            })?;
            examples::outln!("split: waiting on {}", listener.local_addr());
            let stats = split::serve(&listener, &dev, count).await?;
            split::print_summary("this side", &stats);
            dev.shutdown().await;
        }
        Mode::Connect(addr) => {
            let dev = device()?;
            let stats = split::connect(&dev, addr, count).await?;
            split::print_summary("this side", &stats);
            dev.shutdown().await;
        }
    }
    examples::outln!(
        "split: every message verified, the flushed pools deregistered after their replies"
    );
    Ok(())
}
