//! `iwarp-devinfo`: the device's limits and settings, laid out as `ibv_devinfo` prints an
//! RNIC's (`-v` for the limits), for the embedded engine or an iwarpd (`--daemon PATH`, or
//! `IWARP_DEVICE=unix:PATH`).
//!
//! Exit status: 0, 1 if the daemon cannot be asked, 2 for a usage error.

use std::process::ExitCode;

use clap::Parser;
use verbs::{Device, DeviceAttr, DeviceConfig};

/// The device's limits and settings, laid out as ibv_devinfo prints an RNIC's.
#[derive(Parser, Debug)]
#[command(name = "iwarp-devinfo", version)]
struct Cli {
    /// Also print the device's limits (ibv_devinfo -v).
    #[arg(short = 'v', long = "verbose")]
    verbose: bool,
    /// Ask the iwarpd serving local applications at PATH (default: the embedded engine,
    /// or IWARP_DEVICE=unix:PATH).
    #[arg(long = "daemon", value_name = "PATH")]
    daemon: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match cli.daemon {
        Some(path) => DeviceConfig::default().daemon(path),
        None => DeviceConfig::default(),
    };
    let attr = Device::open(cfg).and_then(|d| d.query());
    match attr {
        Ok(a) => {
            examples::out!("{}", render(&a, cli.verbose));
            ExitCode::SUCCESS
        }
        Err(e) => {
            examples::errln!("iwarp-devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The text `ibv_devinfo` would print for this device.
fn render(a: &DeviceAttr, verbose: bool) -> String {
    let limit =
        |n: Option<u32>| n.map_or_else(|| "no limit (memory)".to_owned(), |n| n.to_string());
    let mut s = format!(
        "hca_id:\tiwarp0\n\
         \ttransport:\t\t\tiWARP (1)\n\
         \tfw_ver:\t\t\t\t{}\n\
         \tbackend:\t\t\t{}\n\
         \tphys_port_cnt:\t\t\t1\n",
        a.version, a.backend
    );
    if verbose {
        let yes = |b: bool| if b { "on" } else { "off" };
        s += &format!(
            "\tmax_qp:\t\t\t\t{}\n\
             \tmax_qp_wr:\t\t\t{}\n\
             \tmax_recv_wr:\t\t\t{}\n\
             \tmax_send_sge:\t\t\t{}\n\
             \tmax_recv_sge:\t\t\t{}\n\
             \tmax_mr:\t\t\t\t{}\n\
             \tmax_mw:\t\t\t\t{} (one table with the regions)\n\
             \tmax_srq:\t\t\t{}\n\
             \tmax_qp_rd_atom:\t\t\t{}\n\
             \tmax_qp_init_rd_atom:\t\t{}\n\
             \tatomic_cap:\t\t\t{}\n\
             \tmpa_revision:\t\t\t{}\n\
             \tmpa_crc:\t\t\t{}\n\
             \tmpa_markers:\t\t\t{}\n\
             \tmax_ulpdu:\t\t\t{}\n\
             \textensions:\t\t\t{}\n\
             \tpush_slots:\t\t\t{}\n",
            limit(a.max_qp),
            a.max_qp_wr,
            a.max_recv_wr,
            limit(a.max_send_sge),
            limit(a.max_recv_sge),
            limit(a.max_mr),
            limit(a.max_mr),
            limit(a.max_srq),
            a.max_qp_rd_atom,
            a.max_qp_init_rd_atom,
            if a.atomics {
                "ATOMIC_HCA (RFC 7306)"
            } else {
                "ATOMIC_NONE"
            },
            a.mpa_revision,
            yes(a.crc),
            yes(a.markers),
            a.mulpdu,
            a.extensions,
            a.push_slots,
        );
    }
    s += "\t\tport:\t1\n\
          \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
          \t\t\tlink_layer:\t\tEthernet\n";
    s
}
