//! The command line, parsed by `clap`: the modes are derived subcommands, and every
//! config key is also a flag generated from [`KEYS`] (`--buffer-size 1M`, `--crc=false`,
//! before or after the mode), applied over the config file by [`Config::set`].

use std::path::PathBuf;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, ArgMatches, FromArgMatches, Parser, Subcommand};

use crate::config::{Config, ConfigError, KEYS, parse_size};

/// The text after the options in `iwarpd --help`.
const AFTER_HELP: &str = "\
Every option above but --config is also a key of the config file (TOML, `buffer_size = \"1M\"`);
flags win over the file. Logs go to stderr; RUST_LOG (e.g. RUST_LOG=debug) overrides `log`.
Exit status: 0 success, 1 a failed check or a runtime error, 2 a usage or config error.";

/// `iwarpd`: the host's software RNIC as a daemon. Serves a remote-memory target on
/// `--listen ADDR`: each connection gets a zero-based region of `buffer_size` octets with
/// remote read and write rights, advertised in the MPA Reply private data (RemoteBuf, 16
/// octets, then recv_depth and recv_size as 32-bit big-endian words), and every Send it
/// receives is answered with a Send of the same octets; local applications attach on
/// the `control` socket. SIGINT/SIGTERM shut it down cleanly.
#[derive(Debug, Parser)]
#[command(
    name = "iwarpd",
    version,
    after_help = AFTER_HELP,
    args_override_self = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    /// What to do instead of serving.
    #[command(subcommand)]
    mode: Option<Sub>,
    /// The config file and every setting.
    #[command(flatten)]
    settings: Settings,
}

/// The modes besides serving.
#[derive(Debug, Subcommand)]
enum Sub {
    /// Exercise a daemon at ADDR: N RDMA Writes of a pattern, each Read back and
    /// verified, then N Sends whose echoes are verified; prints throughput. Exits 1 on any
    /// mismatch or error.
    Check {
        /// The daemon's address, HOST:PORT.
        addr: String,
        /// Octets per Write and Read (K, M, G suffixes), at most the peer's buffer
        /// [default: 1M, or the peer's buffer if smaller].
        #[arg(long, value_name = "N", value_parser = check_size)]
        size: Option<u32>,
        /// Rounds of each test.
        #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
    /// Print the counters of the daemon serving local applications on the control
    /// socket (default: the `control` key's): applications, queue pairs, connections,
    /// FPDUs, payload octets per RDMAP opcode, Terminates sent and received, and the push
    /// path's executions and discards by reason.
    Stat {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `--size`: 1 to 4294967295 octets, with an optional K/M/G suffix.
fn check_size(value: &str) -> Result<u32, String> {
    parse_size(value)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| "expected 1 to 4294967295 octets, e.g. --size 1M".to_owned())
}

/// `--config FILE` and a flag for every config key; global, so they go before or after
/// the mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Settings {
    config_file: Option<PathBuf>,
    /// (key, value, flag) for every key given, in [`KEYS`] order.
    overrides: Vec<(String, String, String)>,
}

/// The flag of config key `key`: `buffer_size` is `--buffer-size` (`--buffer_size` too).
fn flag_of(key: &str) -> String {
    key.replace('_', "-")
}

impl clap::Args for Settings {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let config = Arg::new("config")
            .long("config")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .global(true)
            .help("The config file (TOML): settings under the flags given here");
        KEYS.iter().fold(cmd.arg(config), |cmd, &(key, help)| {
            let flag = flag_of(key);
            let mut arg = Arg::new(key)
                .long(flag.clone())
                .value_name("VALUE")
                .action(ArgAction::Set)
                .global(true)
                .help(help);
            if flag != key {
                arg = arg.alias(key);
            }
            cmd.arg(arg)
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for Settings {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let overrides = KEYS
            .iter()
            .filter_map(|&(key, _)| {
                let value = m.get_one::<String>(key)?;
                Some((key.to_owned(), value.clone(), format!("--{}", flag_of(key))))
            })
            .collect();
        Ok(Self {
            config_file: m.get_one::<PathBuf>("config").cloned(),
            overrides,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
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
}

/// The parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Args {
    /// What to do.
    pub(crate) mode: Mode,
    /// `--config FILE`.
    pub(crate) config_file: Option<PathBuf>,
    /// `--KEY VALUE` settings: (key, value, flag).
    pub(crate) overrides: Vec<(String, String, String)>,
}

impl Args {
    /// Parses the command line (`args` starts with the program name). The error is
    /// clap's: `--help`, `--version` or a usage error; [`usage_hint`] adds where the
    /// argument belongs.
    pub(crate) fn parse<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let cli = Cli::try_parse_from(args)?;
        let mode = match cli.mode {
            None => Mode::Serve,
            Some(Sub::Check { addr, size, count }) => Mode::Check { addr, size, count },
            Some(Sub::Stat { json }) => Mode::Stat { json },
        };
        Ok(Self {
            mode,
            config_file: cli.settings.config_file,
            overrides: cli.settings.overrides,
        })
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

/// Where a rejected argument belongs, in the user's words, for the usage errors clap
/// cannot know: a mode's flag given to another mode, an address given without
/// `--listen`, a setting that does not exist.
pub(crate) fn usage_hint(err: &clap::Error) -> Option<String> {
    let arg = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => match err.get(ContextKind::InvalidSubcommand) {
            Some(ContextValue::String(s)) => s.clone(),
            _ => return None,
        },
    };
    let name = arg.trim_start_matches('-');
    let name = name.split_once('=').map_or(name, |(n, _)| n);
    match err.kind() {
        ErrorKind::UnknownArgument if name == "json" => {
            Some("--json belongs to stat mode: iwarpd stat --json".into())
        }
        ErrorKind::UnknownArgument if name == "size" || name == "count" => Some(format!(
            "--{name} belongs to check mode: iwarpd check ADDR --{name} N"
        )),
        ErrorKind::UnknownArgument if arg.starts_with("--") => {
            let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            Some(format!(
                "unknown setting `{name}`: the settings are {} (iwarpd --help says what each means)",
                known.join(", ")
            ))
        }
        // An address where a mode belongs: the user meant to serve on it.
        ErrorKind::InvalidSubcommand
            if arg.contains(':') || arg.parse::<std::net::IpAddr>().is_ok() =>
        {
            Some(format!(
                "the modes are check and stat; settings are flags: --listen {arg} to serve on {arg}"
            ))
        }
        ErrorKind::InvalidSubcommand => Some("the modes are check and stat".into()),
        _ => None,
    }
}

/// The full `--help` text (for the tests).
#[cfg(test)]
fn help() -> String {
    use clap::CommandFactory as _;
    Cli::command().render_long_help().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, clap::Error> {
        Args::parse(std::iter::once("iwarpd").chain(s.split_whitespace()))
    }

    fn hint(s: &str) -> String {
        let e = parse(s).unwrap_err();
        assert_eq!(e.exit_code(), 2, "{e}");
        usage_hint(&e).unwrap_or_else(|| e.to_string())
    }

    #[test]
    fn the_command_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
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
        let a = parse("--control /tmp/y.sock stat").unwrap();
        assert_eq!(
            a.config().unwrap().control,
            crate::config::Control::Path("/tmp/y.sock".into())
        );
        assert!(hint("--json").contains("iwarpd stat --json"));
    }

    #[test]
    fn serve_flags_become_overrides() {
        let a = parse("--listen 127.0.0.1:0 --config x.conf --buffer-size=1M --crc false").unwrap();
        assert_eq!(a.mode, Mode::Serve);
        assert_eq!(a.config_file, Some(PathBuf::from("x.conf")));
        let cfg = a.config();
        assert!(cfg.is_err(), "x.conf does not exist");
        assert!(cfg.unwrap_err().message.contains("cannot read"));
        let a = parse("--listen 127.0.0.1:0 --buffer_size=1M --crc false --crc true").unwrap();
        let cfg = a.config().unwrap();
        assert_eq!(cfg.listen, Some("127.0.0.1:0".parse().unwrap()));
        assert_eq!(
            (cfg.buffer_size, cfg.crc),
            (1 << 20, true),
            "the last --crc wins"
        );
        let a = parse("--listen 127.0.0.1:0 --pcap /tmp/x.pcapng").unwrap();
        assert_eq!(
            a.config().unwrap().pcap,
            Some(PathBuf::from("/tmp/x.pcapng"))
        );
        let e = parse("--listen 127.0.0.1:0 --crc maybe").unwrap().config();
        assert_eq!(e.unwrap_err().origin, "--crc");
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
        let a = parse("--ord 2 check h:1").unwrap();
        assert_eq!(a.config().unwrap().ord, 2);
        assert_eq!(
            a.mode,
            Mode::Check {
                addr: "h:1".into(),
                size: None,
                count: 64
            }
        );
        assert!(parse("check").is_err());
        for help in ["--help", "check --help", "check -h", "stat --help"] {
            assert_eq!(
                parse(help).unwrap_err().kind(),
                ErrorKind::DisplayHelp,
                "{help}"
            );
        }
        assert_eq!(
            parse("--version").unwrap_err().kind(),
            ErrorKind::DisplayVersion
        );
        assert!(parse("check --size 1").is_err());
        assert!(parse("check a:1 --count 0").is_err());
        assert!(
            parse("check a:1 --size 8G")
                .unwrap_err()
                .to_string()
                .contains("--size")
        );
    }

    #[test]
    fn usage_errors_say_what_to_write() {
        let e = parse("--listen").unwrap_err();
        assert!(e.to_string().contains("--listen <VALUE>"), "{e}");
        assert!(hint("0.0.0.0:1").contains("--listen 0.0.0.0:1"));
        assert_eq!(hint("chek"), "the modes are check and stat");
        assert!(hint("--size 1M").contains("check mode"));
        assert!(hint("stat --count 1").contains("iwarpd check ADDR --count"));
        let unknown = hint("--bogus 1");
        assert!(unknown.contains("unknown setting `bogus`"), "{unknown}");
        assert!(unknown.contains("buffer_size"), "{unknown}");
        let help = help();
        assert!(help.contains("--buffer-size <VALUE>"), "{help}");
        assert!(
            help.contains("octets of remote-accessible memory"),
            "{help}"
        );
    }
}
