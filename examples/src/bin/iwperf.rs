//! `iwperf`: perftest's `ib_write_bw` / `ib_read_bw` / `ib_send_bw` / `ib_write_lat` /
//! `ib_read_lat` / `ib_send_lat` with `-R` on this iWARP stack, interoperating with
//! perftest on Linux siw. `iwperf --help`.

use examples::perf::{self, Opts};
use verbs::Device;

#[tokio::main]
async fn main() {
    // Help and --version exit 0, usage errors 2, each naming the flag.
    let opts = Opts::parse(std::env::args().skip(1)).unwrap_or_else(|e| e.exit());
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let test = async move {
        if opts.server.is_some() {
            perf::run_client(&opts).await.map(drop)
        } else {
            serve(&opts).await
        }
    };
    examples::run_on_worker("iwperf", test).await;
}

async fn serve(opts: &Opts) -> Result<(), perf::Error> {
    let dev = Device::open(opts.device_config())?;
    let listener = dev
        .listen(&examples::listen::any_address(opts.port)[..])
        .await?;
    let line = format!(
        "iwperf: {} server listening on {}",
        opts.test.name(),
        listener.local_addr()
    );
    if opts.json || opts.output.is_some() {
        examples::errln!("{line}");
    } else {
        examples::outln!("{line}");
    }
    perf::serve(&dev, &listener, opts).await?;
    Ok(())
}
