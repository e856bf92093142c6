//! `iwarpd`: hosts one software RNIC ([`offload_engine::Engine`]) as a daemon offering a
//! remote-memory target, and checks such a daemon from another machine.
//!
//! ```text
//! iwarpd --listen 0.0.0.0:4791 [--config /etc/iwarpd.conf]     # serve
//! iwarpd --listen 0.0.0.0:4791 --pcap /tmp/iwarpd.pcapng     # serve, capturing to pcapng
//! iwarpd check HOST[:4791] [--size 1M] [--count 64]             # exercise a daemon
//! ```
//!
//! Served connections each get a zero-based region of `buffer_size` octets with remote
//! read and write rights, advertised in the MPA Reply private data
//! (`RemoteBuf::encode()`, then the receive credits and size), and every Send is echoed.
//! The first line on stdout is `listening on ADDR`; logs go to stderr (RUST_LOG, or the
//! `log` setting). SIGINT/SIGTERM stop accepting, disconnect every queue pair and exit 0.
//!
//! Exit codes: 0 success, 1 a failed check or a runtime error, 2 a usage or config error.
//! The config file format is documented in `config.rs` and by `iwarpd --help`.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

mod check;
mod check_addr;
mod cli;
mod config;
mod handover;
mod inherit;
mod link;
mod local_guard;
mod metrics;
mod out;
mod proto;
mod qps;
mod remote_memory;
mod serve;
mod stat;
mod suggest;

use cli::{Args, Mode};

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let args = match Args::parse(argv.iter().cloned()) {
        Ok(a) => a,
        Err(e) => {
            // --help and --version print to stdout and exit 0; usage errors exit 2.
            let _ = e.print();
            if let Some(hint) = cli::usage_hint(&e, cli::mode_word(&argv)) {
                out::eline(&format!("\niwarpd: {hint}"));
            }
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let (cfg, given) = match args.config_given() {
        Ok(c) => c,
        Err(e) => {
            out::eline(&format!("iwarpd: {e}"));
            return ExitCode::from(2);
        }
    };
    if let Mode::Stat { json, qps } = args.mode {
        let path = match &cfg.control {
            config::Control::Path(p) => p.clone(),
            _ => ipc::default_control_path(),
        };
        return stat::run(&path, json, qps);
    }
    if args.mode == Mode::Serve && cfg.listen.is_none() && cfg.take_over.is_none() {
        out::eline(&format!("iwarpd: {}", serve::NO_LISTEN));
        return ExitCode::from(2);
    }
    let default_log = match args.mode {
        Mode::Serve => "info",
        _ => "warn",
    };
    let from_env = EnvFilter::try_from_default_env().ok();
    let by_env = from_env.is_some();
    let filter =
        from_env.unwrap_or_else(|| EnvFilter::new(cfg.log.as_deref().unwrap_or(default_log)));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter_reloading();
    let reload = logs.reload_handle();
    logs.init();
    // The `log` setting a successor takes over from the daemon before (RUST_LOG wins).
    let set_log = move |log: &str| {
        if let (false, Ok(filter)) = (by_env, EnvFilter::try_new(log)) {
            let _ = reload.reload(filter);
        }
    };
    if args.mode == Mode::Serve {
        raise_descriptor_limit();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out::eline(&format!("iwarpd: cannot start the async runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let result = match &args.mode {
        Mode::Check { addr, size, count } => {
            let opts = check::CheckOpts {
                addr: addr.clone(),
                size: *size,
                count: *count,
            };
            rt.block_on(check::run(&cfg, &opts))
                .map_err(|e| format!("check FAILED: {e}"))
        }
        _ => rt.block_on(serve::run(cfg, &given, &set_log)),
    };
    // Connection tasks that outlived the shutdown are not waited for.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            out::eline(&format!("iwarpd: {e}"));
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open descriptors to the hard one: the daemon holds one per
/// region its applications registered, three per queue pair of theirs, and a successor
/// receives all of them at an upgrade.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, limit) {
            tracing::warn!(error = %e, "cannot raise the limit on open descriptors");
        }
    }
}
