//! `iwarp-dump FILE [-v] [--json]`: analyze an iWARP capture (pcap or pcapng).
//!
//! Exit status: 0 clean, 1 protocol violation, 2 usage or read error, 3 warnings only
//! (see the library documentation).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use iwarp_dump::report::{EXIT_USAGE, Report};

const USAGE: &str = "usage: iwarp-dump FILE [-v|--verbose] [--json]

Reads a pcap/pcapng capture (Ethernet, Linux cooked SLL/SLL2, loopback/null), reassembles
TCP, decodes MPA/DDP/RDMAP and checks what Wireshark does not (MSN, MO, Read pairing,
IRD, RTR, invalidated STags, reserved bits, queue vs opcode).

  -v, --verbose   list every FPDU
  --json          print the report as JSON (with -v: including the FPDU list)

exit status: 0 clean, 1 violation found, 2 usage/read error, 3 warnings only
(missing data, unframable stream, Terminate seen, partial FPDU at the end)";

fn exit(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

fn main() -> ExitCode {
    let mut file = None;
    let (mut verbose, mut json) = (false, false);
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--version") => {
                println!("iwarp-dump {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            Some("-v" | "--verbose") => verbose = true,
            Some("--json") => json = true,
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some(s) if s.starts_with('-') && s.len() > 1 => {
                eprintln!("iwarp-dump: unknown option {s}\n{USAGE}");
                return exit(EXIT_USAGE);
            }
            _ if file.is_none() => file = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("iwarp-dump: more than one file\n{USAGE}");
                return exit(EXIT_USAGE);
            }
        }
    }
    let Some(file) = file else {
        eprintln!("{USAGE}");
        return exit(EXIT_USAGE);
    };
    let report: Report = match iwarp_dump::analyze_file(&file, verbose) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("iwarp-dump: {e}");
            return exit(EXIT_USAGE);
        }
    };
    let text = if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("iwarp-dump: JSON: {e}");
                return exit(EXIT_USAGE);
            }
        }
    } else {
        report.render(verbose)
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        // A reader that stopped early (`iwarp-dump FILE -v | head`) is not an error: stop
        // quietly, as Unix tools do, with the analysis's own status.
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            eprintln!("iwarp-dump: cannot write the report: {e}");
            return exit(EXIT_USAGE);
        }
    }
    exit(report.exit_code)
}
