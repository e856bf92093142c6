//! `iwarp-rping`: rdma-core's `rping` on this stack; interoperates with `rping` on Linux
//! siw in both roles.
//!
//! ```text
//! iwarp-rping -s [-a ADDR] [-p PORT] [-C COUNT] [-v] [-P] [--crc] [--p2p] [-d]
//! iwarp-rping -c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [--crc] [--p2p]
//!             [--first-delay MS] [-d]
//! ```
//!
//! The protocol and the options are described in [`examples::rping`]; `--help` lists them.
//! Exit status: 0 on success, 1 on a failed run, 2 on a bad command line.

use examples::rping::{self, Opts, Role};
use examples::words::count;
use verbs::Device;

#[tokio::main]
async fn main() {
    // Help and --version exit 0, usage errors 2, each naming the flag.
    let opts = Opts::parse(std::env::args().skip(1)).unwrap_or_else(|e| e.exit());
    if opts.debug {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("debug"));
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    }
    let run = async move {
        match opts.role {
            Role::Client => rping::run_client(&opts).await.map(|s| {
                examples::outln!(
                    "iwarp-rping: client done: {}, {} verified",
                    count(s.pings, "ping", "pings"),
                    s.verified
                );
            }),
            Role::Server => serve(&opts).await,
        }
    };
    examples::run_on_worker("iwarp-rping", run).await;
}

async fn serve(opts: &Opts) -> Result<(), rping::Error> {
    let dev = Device::open(opts.device_config())?;
    let listener = dev.listen(&opts.listen_addrs()[..]).await?;
    examples::outln!("iwarp-rping: listening on {}", listener.local_addr());
    let s = rping::serve(&dev, &listener, opts).await?;
    examples::outln!(
        "iwarp-rping: server done: {}, {}",
        count(s.connections, "connection", "connections"),
        count(s.pings, "ping", "pings")
    );
    Ok(())
}
