//! Command-line parsing, by hand: two modes and a handful of flags do not need a parser
//! crate, and every config key doubles as a flag through [`Config::set`].

use std::fmt;
use std::path::PathBuf;

use crate::config::{Config, ConfigError, KEYS, canonical_key, parse_size};

/// The usage text.
pub(crate) const USAGE: &str = "\
usage:
  iwarpd --listen ADDR [--config FILE] [--KEY VALUE]...
      Serve: accept iWARP connections on ADDR (IP:PORT; port 0 picks one and prints it).
      Each connection gets a zero-based region of buffer_size octets with remote read and
      write rights, advertised in the MPA Reply private data (RemoteBuf, 16 octets, then
      recv_depth and recv_size as 32-bit big-endian words), and every Send it receives is
      answered with a Send of the same octets. SIGINT/SIGTERM shut it down cleanly.
  iwarpd check ADDR [--size N] [--count N] [--config FILE] [--KEY VALUE]...
      Exercise a daemon at ADDR (HOST:PORT): N RDMA Writes of a pattern, each Read back and
      verified, then N Sends whose echoes are verified; prints throughput. Exits 1 on any
      mismatch or error. --size defaults to 1M (at most the peer's buffer), --count to 64.
  iwarpd stat [--json] [--control PATH] [--config FILE]
      Print the counters of the daemon serving local applications at PATH (default: the
      `control` key's): applications, queue pairs, connections, FPDUs, payload octets per
      RDMAP opcode, Terminates sent and received, and the push path's executions and
      discards by reason. --json prints one JSON object instead of a table.
  iwarpd --help

Every config-file key is also a flag (--buffer-size 1M, --crc=false); flags win over the
file. Keys:";

/// The full help text: usage and the key list.
pub(crate) fn help() -> String {
    let mut s = USAGE.to_owned();
    for (k, d) in KEYS {
        s.push_str(&format!("\n  {k:<16} {d}"));
    }
    s.push_str("\n\nLogs go to stderr; RUST_LOG (e.g. RUST_LOG=debug) overrides the `log` key.");
    s
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Run the daemon.
    Serve,
    /// Exercise a remote daemon.
    Check {
        /// The daemon's address, `HOST:PORT`.
        addr: String,
        /// Octets per RDMA Write/Read (and Send, up to the peer's receive size).
        size: Option<u32>,
        /// Rounds of each test.
        count: u32,
    },
    /// Print a running daemon's counters.
    Stat {
        /// As JSON instead of a table.
        json: bool,
    },
    /// Print the help.
    Help,
}

/// The parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Args {
    /// What to do.
    pub(crate) mode: Mode,
    /// `--config FILE`.
    pub(crate) config_file: Option<PathBuf>,
    /// `--KEY VALUE` settings, in order: (key, value, flag as written).
    pub(crate) overrides: Vec<(String, String, String)>,
}

/// A command line that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Args {
    /// Parses the arguments after the program name.
    pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, UsageError> {
        let mut args = args.into_iter().peekable();
        let mut check = None;
        let mut stat = None;
        if args.peek().map(String::as_str) == Some("stat") {
            args.next();
            stat = Some(false);
        }
        if args.peek().map(String::as_str) == Some("check") {
            args.next();
            if matches!(args.peek().map(String::as_str), Some("-h" | "--help")) {
                return Ok(Self {
                    mode: Mode::Help,
                    config_file: None,
                    overrides: Vec::new(),
                });
            }
            let addr = args
                .next()
                .filter(|a| !a.starts_with("--"))
                .ok_or_else(|| {
                    UsageError(
                        "`iwarpd check` needs the daemon's address: iwarpd check HOST:PORT".into(),
                    )
                })?;
            check = Some((addr, None, 64));
        }
        let mut out = Self {
            mode: Mode::Serve,
            config_file: None,
            overrides: Vec::new(),
        };
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                out.mode = Mode::Help;
                return Ok(out);
            }
            if arg == "--json" {
                match stat.as_mut() {
                    Some(json) => *json = true,
                    None => {
                        return Err(UsageError(
                            "--json belongs to stat mode: iwarpd stat --json".into(),
                        ));
                    }
                }
                continue;
            }
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(UsageError(format!(
                    "unexpected argument `{arg}`: settings are flags, e.g. --listen {arg}"
                )));
            };
            let (name, value) = match flag.split_once('=') {
                Some((n, v)) => (n.to_owned(), v.to_owned()),
                None => {
                    let v = args.next().ok_or_else(|| {
                        UsageError(format!("--{flag} needs a value: --{flag} VALUE"))
                    })?;
                    (flag.to_owned(), v)
                }
            };
            let key = canonical_key(&name);
            match (key.as_str(), check.as_mut()) {
                ("config", _) => out.config_file = Some(PathBuf::from(value)),
                ("size", Some((_, size, _))) => {
                    let n = parse_size(&value)
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|&n| n > 0)
                        .ok_or_else(|| {
                            UsageError(format!(
                                "--size {value}: expected 1 to 4294967295 octets, e.g. --size 1M"
                            ))
                        })?;
                    *size = Some(n);
                }
                ("count", Some((_, _, count))) => {
                    *count = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        UsageError(format!("--count {value}: expected a positive whole number"))
                    })?;
                }
                ("size" | "count", None) => {
                    return Err(UsageError(format!(
                        "--{name} belongs to check mode: iwarpd check ADDR --{name} {value}"
                    )));
                }
                _ => out.overrides.push((key, value, format!("--{name}"))),
            }
        }
        if let Some((addr, size, count)) = check {
            out.mode = Mode::Check { addr, size, count };
        }
        if let Some(json) = stat {
            out.mode = Mode::Stat { json };
        }
        Ok(out)
    }

    /// The settings: defaults, then the config file, then the flags.
    pub(crate) fn config(&self) -> Result<Config, ConfigError> {
        let mut cfg = Config::default();
        if let Some(path) = &self.config_file {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                origin: name.clone(),
                message: format!("cannot read the config file ({e}): check the --config path"),
            })?;
            if cfg.load_str(&text, &name)? == crate::config::Format::Unquoted {
                eprintln!(
                    "iwarpd: {name} is in the unquoted form of earlier versions; it still \
                     works, but the config file is TOML now: put text values in quotes \
                     (listen = \"0.0.0.0:4791\", buffer_size = \"4M\")"
                );
            }
        }
        for (key, value, flag) in &self.overrides {
            cfg.set(key, value, flag)?;
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, UsageError> {
        Args::parse(s.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn stat_mode_takes_json_and_the_control_path() {
        let a = parse("stat --json --control /tmp/x.sock").unwrap();
        assert_eq!(a.mode, Mode::Stat { json: true });
        assert_eq!(
            a.config().unwrap().control,
            crate::config::Control::Path("/tmp/x.sock".into())
        );
        assert_eq!(parse("stat").unwrap().mode, Mode::Stat { json: false });
        assert!(
            parse("--json")
                .unwrap_err()
                .0
                .contains("iwarpd stat --json")
        );
    }

    #[test]
    fn serve_flags_become_overrides() {
        let a = parse("--listen 127.0.0.1:0 --config x.conf --buffer-size=1M --crc false").unwrap();
        assert_eq!(a.mode, Mode::Serve);
        assert_eq!(a.config_file, Some(PathBuf::from("x.conf")));
        let cfg = a.config();
        assert!(cfg.is_err(), "x.conf does not exist");
        assert!(cfg.unwrap_err().message.contains("cannot read"));
        let a = parse("--listen 127.0.0.1:0 --buffer-size=1M --crc false").unwrap();
        let cfg = a.config().unwrap();
        assert_eq!(cfg.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!((cfg.buffer_size, cfg.crc), (1 << 20, false));
        let a = parse("--listen 127.0.0.1:0 --pcap /tmp/x.pcapng").unwrap();
        assert_eq!(
            a.config().unwrap().pcap,
            Some(PathBuf::from("/tmp/x.pcapng"))
        );
    }

    #[test]
    fn check_mode() {
        let a = parse("check 10.0.0.1:4791 --size 64K --count 3 --ord 4").unwrap();
        assert_eq!(
            a.mode,
            Mode::Check {
                addr: "10.0.0.1:4791".into(),
                size: Some(65536),
                count: 3
            }
        );
        assert_eq!(a.config().unwrap().ord, 4);
        assert!(parse("check").is_err());
        assert_eq!(parse("check --help").unwrap().mode, Mode::Help);
        assert_eq!(parse("check -h").unwrap().mode, Mode::Help);
        assert_eq!(parse("stat --help").unwrap().mode, Mode::Help);
        assert!(parse("check --size 1").is_err());
        assert!(parse("check a:1 --count 0").is_err());
        assert!(parse("check a:1 --size 8G").is_err());
    }

    #[test]
    fn usage_errors_say_what_to_write() {
        let e = parse("--listen").unwrap_err();
        assert!(e.0.contains("--listen VALUE"), "{e}");
        let e = parse("0.0.0.0:1").unwrap_err();
        assert!(e.0.contains("--listen 0.0.0.0:1"), "{e}");
        let e = parse("--size 1M").unwrap_err();
        assert!(e.0.contains("check mode"), "{e}");
        let e = parse("--bogus 1").unwrap().config().unwrap_err();
        assert_eq!(e.origin, "--bogus");
        assert_eq!(parse("--crc 1 -h").unwrap().mode, Mode::Help);
        assert!(help().contains("buffer_size"));
    }
}
