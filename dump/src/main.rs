//! `iwarp-dump FILE [-v] [--json]`: analyze an iWARP capture (pcap or pcapng).
//!
//! Exit status: 0 clean, 1 protocol violation, 2 usage or read error, 3 warnings only
//! (see the library documentation).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use iwarp_dump::report::{EXIT_USAGE, Report};

/// Reads a pcap/pcapng capture (Ethernet, Linux cooked SLL/SLL2, loopback/null),
/// reassembles TCP, decodes MPA/DDP/RDMAP and checks what Wireshark does not (MSN, MO,
/// Read pairing, IRD, RTR, invalidated STags, reserved bits, queue vs opcode).
#[derive(Debug, Parser)]
#[command(name = "iwarp-dump", version, after_help = AFTER_HELP)]
struct Cli {
    /// The capture (pcap or pcapng).
    file: PathBuf,
    /// List every FPDU.
    #[arg(short, long)]
    verbose: bool,
    /// Print the report as JSON (with -v: including the FPDU list).
    #[arg(long)]
    json: bool,
}

const AFTER_HELP: &str = "\
Exit status: 0 clean, 1 violation found, 2 usage/read error (a capture cut short or damaged
is reported as far as it was read, and exits 2), 3 warnings only (missing data, unframable
stream, Terminate seen, partial FPDU at the end).";

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn main() -> ExitCode {
    let Cli {
        file,
        verbose,
        json,
    } = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version go to stdout with status 0.
            let _ = e.print();
            return exit(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let report: Report = match iwarp_dump::analyze_file(&file, verbose) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(io::stderr(), "iwarp-dump: {e}");
            return exit(EXIT_USAGE);
        }
    };
    let text = if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                let _ = writeln!(io::stderr(), "iwarp-dump: JSON: {e}");
                return exit(EXIT_USAGE);
            }
        }
    } else {
        report.render(verbose)
    };
    // As tshark and capinfos do: what was read, then the reason reading stopped.
    if let Some(e) = &report.read_error {
        let _ = writeln!(io::stderr(), "iwarp-dump: {}: {e}", file.display());
    }
    match io::stdout().lock().write_all(text.as_bytes()) {
        // A reader that stopped early (`iwarp-dump FILE -v | head`) is not an error: stop
        // quietly, as Unix tools do, with the analysis's own status.
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            let _ = writeln!(io::stderr(), "iwarp-dump: cannot write the report: {e}");
            return exit(EXIT_USAGE);
        }
    }
    exit(report.exit_code)
}
