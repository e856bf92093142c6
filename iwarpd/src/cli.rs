//! The command line, parsed by `clap`: the modes are derived subcommands, and every
//! config key is also a flag generated from [`KEYS`] (`--buffer-size 1M`, `--crc=false`),
//! applied over the config file by [`Config::set`]. Before the mode every key is a flag;
//! after it, only the keys the mode uses ([`CHECK_KEYS`], [`STAT_KEYS`]), so that
//! `iwarpd check --help` lists only what a check uses.

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
    settings: Settings<Daemon>,
}

/// The modes besides serving.
#[derive(Debug, Subcommand)]
enum Sub {
    /// Exercise a daemon at ADDR: N RDMA Writes of a pattern, each Read back and
    /// verified, then N Sends whose echoes are verified; prints throughput. Exits 1 on any
    /// mismatch or error.
    Check {
        /// The daemon's address: HOST or HOST:PORT (port 4791 when left out); IPv6 as
        /// [::1] or [::1]:PORT.
        addr: String,
        /// Octets per Write and Read (K, M, G suffixes), at most the peer's buffer
        /// [default: 1M, or the peer's buffer if smaller].
        #[arg(long, value_name = "N", value_parser = check_size)]
        size: Option<u32>,
        /// Rounds of each test.
        #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
        /// The config file and the settings of the check's own connection.
        #[command(flatten)]
        settings: Settings<CheckScope>,
    },
    /// Print the counters of the daemon serving local applications on the control
    /// socket (default: the `control` key's): applications, queue pairs, connections,
    /// FPDUs, payload octets per RDMAP opcode, Terminates sent and received, and the push
    /// path's executions and discards by reason; for its local applications and its
    /// built-in remote-memory service, as its metrics endpoint shows them.
    Stat {
        /// One JSON object instead of a table (with --qps, an array of them).
        #[arg(long)]
        json: bool,
        /// List every queue pair instead, one line each (as `rdma res show qp`): number,
        /// service, state, local and peer address, the owning application's pid and uid,
        /// counters.
        #[arg(long)]
        qps: bool,
        /// The config file and the control socket.
        #[command(flatten)]
        settings: Settings<StatScope>,
    },
}

/// `--size`: 1 to 4294967295 octets, with an optional K/M/G suffix.
fn check_size(value: &str) -> Result<u32, String> {
    parse_size(value)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|&n| n > 0)
        .ok_or_else(|| "expected 1 to 4294967295 octets, e.g. --size 1M".to_owned())
}

/// Which config keys a command takes as flags.
trait Scope {
    /// Its keys, in [`KEYS`] order; `None`: every key.
    const KEYS: Option<&'static [&'static str]>;

    /// Whether `key` is one of its flags.
    fn takes(key: &str) -> bool {
        Self::KEYS.is_none_or(|keys| keys.contains(&key))
    }
}

/// The daemon: every key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Daemon;

impl Scope for Daemon {
    const KEYS: Option<&'static [&'static str]> = None;
}

/// `iwarpd check`: the settings of its one connection, its log and its capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct CheckScope;

/// The keys `iwarpd check` takes.
pub(crate) const CHECK_KEYS: &[&str] = &[
    "crc",
    "markers",
    "large_fpdus",
    "extensions",
    "mpa_revision",
    "ird",
    "ord",
    "p2p",
    "connect_timeout",
    "log",
    "pcap",
];

impl Scope for CheckScope {
    const KEYS: Option<&'static [&'static str]> = Some(CHECK_KEYS);
}

/// `iwarpd stat`: where the daemon is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct StatScope;

/// The keys `iwarpd stat` takes.
pub(crate) const STAT_KEYS: &[&str] = &["control"];

impl Scope for StatScope {
    const KEYS: Option<&'static [&'static str]> = Some(STAT_KEYS);
}

/// `--config FILE` and a flag for every config key of scope `S`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Settings<S> {
    config_file: Option<PathBuf>,
    /// (key, value, flag) for every key given, in [`KEYS`] order.
    overrides: Vec<(String, String, String)>,
    scope: std::marker::PhantomData<S>,
}

/// The flag of config key `key`: `buffer_size` is `--buffer-size` (`--buffer_size` too).
fn flag_of(key: &str) -> String {
    key.replace('_', "-")
}

/// The keys of scope `S`, with what each means.
fn keys_of<S: Scope>() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    KEYS.iter().filter(|(key, _)| S::takes(key))
}

impl<S: Scope + Clone + Send + Sync + 'static> clap::Args for Settings<S> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let config = Arg::new("config")
            .long("config")
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .help("The config file (TOML): settings under the flags given here");
        keys_of::<S>().fold(cmd.arg(config), |cmd, &(key, help)| {
            let flag = flag_of(key);
            let mut arg = Arg::new(key)
                .long(flag.clone())
                .value_name("VALUE")
                .action(ArgAction::Set)
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

impl<S: Scope> FromArgMatches for Settings<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let overrides = keys_of::<S>()
            .filter_map(|&(key, _)| {
                let value = m.get_one::<String>(key)?;
                Some((key.to_owned(), value.clone(), format!("--{}", flag_of(key))))
            })
            .collect();
        Ok(Self {
            config_file: m.get_one::<PathBuf>("config").cloned(),
            overrides,
            scope: std::marker::PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<S> Settings<S> {
    /// These settings, then `later`'s over them (a mode's flags over the daemon's).
    fn then<T>(self, later: Settings<T>) -> (Option<PathBuf>, Vec<(String, String, String)>) {
        let mut overrides = self.overrides;
        overrides.extend(later.overrides);
        (later.config_file.or(self.config_file), overrides)
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
        /// Every queue pair instead of the totals.
        qps: bool,
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
        let (mode, (config_file, overrides)) = match cli.mode {
            None => (
                Mode::Serve,
                cli.settings.then(Settings::<Daemon>::default()),
            ),
            Some(Sub::Check {
                addr,
                size,
                count,
                settings,
            }) => (
                Mode::Check { addr, size, count },
                cli.settings.then(settings),
            ),
            Some(Sub::Stat {
                json,
                qps,
                settings,
            }) => (Mode::Stat { json, qps }, cli.settings.then(settings)),
        };
        Ok(Self {
            mode,
            config_file,
            overrides,
        })
    }

    /// The settings: defaults, then the config file, then the flags.
    #[cfg(test)]
    pub(crate) fn config(&self) -> Result<Config, ConfigError> {
        self.config_given().map(|(cfg, _)| cfg)
    }

    /// [`Self::config`], and the keys given in the config file or as flags, each with
    /// its origin (`FILE line N`, `--flag`; a flag's after the file's line).
    pub(crate) fn config_given(&self) -> Result<(Config, Vec<(String, String)>), ConfigError> {
        let mut given = Vec::new();
        let mut cfg = Config::default();
        if let Some(path) = &self.config_file {
            let name = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
                origin: name.clone(),
                message: format!("cannot read the config file ({e}): check the --config path"),
            })?;
            let format = cfg.load_str(&text, &name)?;
            given.extend(crate::config::keys_in_file(&text, &name));
            if format == crate::config::Format::Unquoted {
                crate::out::eline(&format!(
                    "iwarpd: {name} is in the unquoted form of earlier versions; it still \
                     works, but the config file is TOML now: put text values in quotes \
                     (listen = \"0.0.0.0:4791\", buffer_size = \"4M\")"
                ));
            }
        }
        for (key, value, flag) in &self.overrides {
            cfg.set(key, value, flag)?;
            given.push((key.clone(), flag.clone()));
        }
        Ok((cfg, given))
    }
}

/// The mode a command line asks for (`check`, `stat`), if any: its first word that names
/// one.
pub(crate) fn mode_word(args: &[std::ffi::OsString]) -> Option<&'static str> {
    args.iter()
        .skip(1)
        .find_map(|a| ["check", "stat"].into_iter().find(|m| a.as_os_str() == *m))
}

/// Where a rejected argument belongs, in the user's words, for the usage errors clap
/// cannot know: a mode's flag given to another mode, a daemon's setting given to a mode
/// (`mode`: the one asked for), an address given without `--listen`, a setting that does
/// not exist.
pub(crate) fn usage_hint(err: &clap::Error, mode: Option<&str>) -> Option<String> {
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
        ErrorKind::UnknownArgument
            if arg.starts_with("--") && mode.is_some() && describe_flag(name).is_some() =>
        {
            let mode = mode.unwrap_or_default();
            let takes = if mode == "stat" {
                STAT_KEYS
            } else {
                CHECK_KEYS
            };
            let flags: Vec<String> = takes.iter().map(|k| format!("--{}", flag_of(k))).collect();
            Some(format!(
                "--{name} is a setting of the daemon, not of `iwarpd {mode}`, which takes \
                 --config and {} (iwarpd {mode} --help says what each means)",
                flags.join(", ")
            ))
        }
        ErrorKind::UnknownArgument if arg.starts_with("--") => {
            let known: Vec<&str> = KEYS.iter().map(|(k, _)| *k).collect();
            let key = crate::config::canonical_key(name);
            let guess = crate::suggest::nearest(&key, known.iter().copied())
                .map(|k| format!(" did you mean --{}?", flag_of(k)))
                .unwrap_or_default();
            Some(format!(
                "unknown setting `{name}`:{guess} the settings are {} (iwarpd --help says what \
                 each means)",
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

/// The config key a flag name (`buffer-size`, `buffer_size`) stands for, if any.
fn describe_flag(name: &str) -> Option<&'static str> {
    let key = crate::config::canonical_key(name);
    KEYS.iter().find(|(k, _)| *k == key).map(|(k, _)| *k)
}

/// The full `--help` text (for the tests): the daemon's, or a mode's.
#[cfg(test)]
fn help_of(mode: Option<&str>) -> String {
    use clap::CommandFactory as _;
    let mut cmd = Cli::command();
    cmd.build();
    match mode {
        None => cmd.render_long_help().to_string(),
        Some(m) => cmd
            .find_subcommand_mut(m)
            .expect("a mode")
            .render_long_help()
            .to_string(),
    }
}

/// The daemon's `--help` text (for the tests).
#[cfg(test)]
fn help() -> String {
    help_of(None)
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
        let args: Vec<std::ffi::OsString> = std::iter::once("iwarpd")
            .chain(s.split_whitespace())
            .map(Into::into)
            .collect();
        usage_hint(&e, mode_word(&args)).unwrap_or_else(|| e.to_string())
    }

    #[test]
    fn the_command_is_well_formed() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }

    #[test]
    fn stat_mode_takes_json_and_the_control_path() {
        let a = parse("stat --json --control /tmp/x.sock").unwrap();
        assert_eq!(
            a.mode,
            Mode::Stat {
                json: true,
                qps: false
            }
        );
        assert_eq!(
            a.config().unwrap().control,
            crate::config::Control::Path("/tmp/x.sock".into())
        );
        assert_eq!(
            parse("stat").unwrap().mode,
            Mode::Stat {
                json: false,
                qps: false
            }
        );
        assert_eq!(
            parse("stat --qps --json").unwrap().mode,
            Mode::Stat {
                json: true,
                qps: true
            }
        );
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

    /// The long flags a `--help` text lists (its lines that start with a flag).
    fn flags_in(help: &str) -> Vec<String> {
        help.lines()
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
            .map(|w| w.trim_end_matches(',').to_owned())
            .collect()
    }

    #[test]
    fn each_mode_lists_only_its_own_options() {
        let mut got = flags_in(&help_of(Some("check")));
        let mut want: Vec<String> = ["--size", "--count", "--config"]
            .into_iter()
            .map(String::from)
            .chain(CHECK_KEYS.iter().map(|k| format!("--{}", flag_of(k))))
            .chain(["--help".into()])
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "check --help");
        let mut stat = flags_in(&help_of(Some("stat")));
        stat.sort();
        assert_eq!(
            stat,
            ["--config", "--control", "--help", "--json", "--qps"],
            "stat --help"
        );
        // The daemon's lists every key.
        let daemon = flags_in(&help());
        for (key, _) in KEYS {
            assert!(
                daemon.contains(&format!("--{}", flag_of(key))),
                "--help lacks {key}"
            );
        }
        // A mode's own settings after it, the daemon's before it.
        let a = parse("check h --crc false --log debug").unwrap();
        assert!(!a.config().unwrap().crc);
        let a = parse("--control /tmp/a.sock stat --control /tmp/b.sock").unwrap();
        assert_eq!(
            a.config().unwrap().control,
            crate::config::Control::Path("/tmp/b.sock".into()),
            "the mode's flag wins"
        );
        let e = hint("check h --buffer-size 1M");
        assert!(
            e.contains("--buffer-size is a setting of the daemon"),
            "{e}"
        );
        assert!(e.contains("--crc"), "{e}");
        let e = hint("stat --crc false");
        assert!(
            e.contains("not of `iwarpd stat`, which takes --config and --control"),
            "{e}"
        );
    }
}
