//! `split`: seed 002's push-push messaging protocol between two sides of a split driver,
//! over iWARP (see [`examples::split`] for the protocol).
//!
//! `split` runs both sides in this process over 127.0.0.1; `split --serve` and
//! `split HOST` run one side each on two hosts. `split --help` for the options.

use std::net::{SocketAddr, ToSocketAddrs};

use examples::split::{self, DEFAULT_PORT};
use examples::{Error, verbs};

const HELP: &str = "\
split: seed 002's push-push messaging (split driver) over iWARP

USAGE:
    split [--count N]                  both sides in this process over 127.0.0.1
    split --serve [ADDR] [--count N]   one side: wait for the other (default 0.0.0.0:7475)
    split HOST[:PORT] [--count N]      the other side: connect (default port 7475)

Each side advertises three buffer pools, then pushes N messages of mixed sizes
(1 B to 96 KiB) into the other's pools by RDMA Write plus an indication (immediate data,
or a BufferRDMAIndicate message for the 96 KiB pool), under element and receive
credits; halfway through each side flushes its 4 KiB pool. Every octet is verified.

OPTIONS:
    -n, --count N    messages each side pushes (default 1000)
    -h, --help       this text";

enum Mode {
    Loopback,
    Serve(SocketAddr),
    Connect(SocketAddr),
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<(Mode, u64)>, String> {
    let (mut mode, mut count) = (Mode::Loopback, 1000);
    let mut it = args.into_iter().peekable();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "-n" | "--count" => {
                let v = it.next().ok_or("--count needs a number")?;
                count = v
                    .parse()
                    .map_err(|_| format!("--count {v:?}: not a number"))?;
            }
            "--serve" => {
                let at = match it.next_if(|a| !a.starts_with('-')) {
                    Some(a) => resolve(&a)?,
                    None => SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
                };
                mode = Mode::Serve(at);
            }
            a if !a.starts_with('-') => mode = Mode::Connect(resolve(a)?),
            a => return Err(format!("unknown option {a:?}; see split --help")),
        }
    }
    Ok(Some((mode, count)))
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
async fn main() -> Result<(), Error> {
    examples::answer_version("split");
    let Some((mode, count)) = parse(std::env::args().skip(1))? else {
        println!("{HELP}");
        return Ok(());
    };
    let device = || verbs::Device::open(verbs::DeviceConfig::default());
    match mode {
        Mode::Loopback => {
            let (a, b) = split::loopback(count).await?;
            split::print_summary("side A", &a);
            split::print_summary("side B", &b);
        }
        Mode::Serve(at) => {
            let dev = device();
            let listener = dev.listen(at).await.map_err(|e| {
                format!("cannot listen on {at}: {e}; pick another address with --serve ADDR")
            })?;
            println!("split: waiting on {}", listener.local_addr());
            let stats = split::serve(&listener, &dev, count).await?;
            split::print_summary("this side", &stats);
            dev.shutdown().await;
        }
        Mode::Connect(addr) => {
            let dev = device();
            let stats = split::connect(&dev, addr, count).await?;
            split::print_summary("this side", &stats);
            dev.shutdown().await;
        }
    }
    println!("split: every message verified, the flushed pools deregistered after their replies");
    Ok(())
}
