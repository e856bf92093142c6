//! The daemon's settings: a TOML file of `key = value` settings, overridden by
//! command-line flags.
//!
//! # File format
//!
//! TOML (read by the `toml` crate): one `key = value` per line, text in quotes, numbers
//! and `true`/`false` bare; `#` starts a comment. `iwarpd.conf` beside this file is an
//! example with every key:
//!
#![doc = concat!("```text\n", include_str!("iwarpd.conf"), "```")]
//!
//! Sizes are octets: a number, or text with a `K`, `M` or `G` suffix (binary: KiB, MiB,
//! GiB; `KiB` etc. are accepted too), `buffer_size = "4M"`. Booleans are `true`/`false`
//! (as text also `yes`/`no`, `on`/`off`, `1`/`0`). Keys may be written with `-` instead
//! of `_`. Every key is also a flag: `--buffer-size 1M` or `--crc=false`; flags win over
//! the file.
//!
//! Files written for iwarpd before it read TOML (the same keys, text without quotes:
//! `listen = 0.0.0.0:4791`) still load, with a notice on how to make them TOML.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use iwarpd::local::LocalConfig;
use offload_engine::{CaptureTap, EngineConfig};
use toml::Spanned;
use tracing_subscriber::EnvFilter;

/// Every key: name, what it means.
pub(crate) const KEYS: &[(&str, &str)] = &[
    (
        "listen",
        "address and TCP port to listen on, e.g. 0.0.0.0:4791",
    ),
    (
        "buffer_size",
        "octets of remote-accessible memory per connection",
    ),
    (
        "recv_depth",
        "receives kept posted per connection (1..=4096)",
    ),
    (
        "recv_size",
        "octets per receive: the largest Send that is echoed",
    ),
    ("max_qps", "connections served at once (more are rejected)"),
    (
        "max_qps_per_address",
        "connections served at once from one IP address (more are rejected)",
    ),
    (
        "max_pending_handshakes",
        "connections in the MPA handshake at once (more are closed unanswered)",
    ),
    (
        "max_pending_per_address",
        "connections in the MPA handshake at once from one IP address",
    ),
    (
        "idle_timeout",
        "seconds a connection with nothing outstanding may stay silent (0: no limit)",
    ),
    (
        "stall_timeout",
        "seconds a connection with work outstanding may make no progress (0: no limit)",
    ),
    (
        "keepalive",
        "seconds of silence before TCP keepalive probes (0: off)",
    ),
    (
        "busy_poll_us",
        "microseconds a connection polls its socket after answering a Read or Atomic, \
         instead of sleeping until the kernel wakes it (0: off)",
    ),
    ("crc", "ask for MPA CRC32c (boolean)"),
    ("markers", "ask the peer to insert MPA markers (boolean)"),
    (
        "large_fpdus",
        "offer FPDUs larger than one TCP segment, siw's experimental bit (boolean)",
    ),
    (
        "extensions",
        "this stack's extensions to offer and accept: send_imm, read_v2, all or none",
    ),
    ("mpa_revision", "MPA revision: 1 or 2"),
    ("ird", "inbound RDMA Read/Atomic limit (0..=16383)"),
    ("ord", "outbound RDMA Read/Atomic limit (0..=16383)"),
    ("p2p", "as initiator, ask for peer-to-peer mode (boolean)"),
    (
        "connect_timeout",
        "seconds a connect and MPA exchange may take",
    ),
    (
        "log",
        "log filter when RUST_LOG is unset, e.g. info or offload_engine=debug",
    ),
    (
        "pcap",
        "write a pcapng of every connection to this file (for Wireshark/tshark)",
    ),
    (
        "control",
        "Unix socket local applications attach to (verbs with IWARP_DEVICE=unix:PATH), \
         `off`, or `default`: /run/iwarpd.sock as root, else $XDG_RUNTIME_DIR/iwarpd.sock",
    ),
    (
        "handover",
        "Unix socket where this daemon hands its connections and its local applications' \
         sessions to a successor that starts with take_over (an upgrade without \
         disconnecting anyone); default: none",
    ),
    (
        "take_over",
        "take over the connections and the local applications of the daemon whose handover \
         socket this is, then serve them, the listen address and the control socket as it did",
    ),
    (
        "metrics",
        "address to serve Prometheus metrics on, over HTTP at /metrics (for example \
         127.0.0.1:9464), or `off` (the default)",
    ),
    (
        "local_threads",
        "threads serving local applications (1..=256; default: one per processor); each \
         application's queue pairs run on one of them",
    ),
    (
        "max_local_clients",
        "local applications attached at once (1..=65536; default 1024); one more is told \
         the limit when it opens the device",
    ),
    (
        "max_local_clients_per_user",
        "local applications one user may have attached at once (1..=65536; default 256)",
    ),
    (
        "max_local_qps",
        "queue pairs one user's local applications may hold together (1..=1048576; \
         default 4096)",
    ),
    (
        "max_local_mrs",
        "regions, memory windows and reserved STags one user's local applications may \
         hold together (1..=16777215; default 65536)",
    ),
    (
        "max_local_mrs_total",
        "the same, of every local application together (1..=16777215; default 1048576)",
    ),
    (
        "max_registered",
        "octets of registered memory iwarpd maps for every local application together, \
         one user at most half (a size, for example 16G; default: this machine's memory)",
    ),
    (
        "max_queue_depth",
        "the deepest send or receive queue a local application's queue pair may ask for \
         (1..=65536; default 16384)",
    ),
    (
        "staging_size",
        "octets of each local queue pair's staging area, where owned (Bytes) payloads over \
         160 octets wait until sent: it bounds how many are in flight (16 of 64 KiB at the \
         default 1M); a size, a multiple of 64 from 64K to 64M",
    ),
];

/// Where local applications attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// The default path (skipped with a warning if another daemon serves it).
    Default,
    /// This path (an error if another daemon serves it).
    Path(PathBuf),
    /// No local applications.
    Off,
}

/// The largest `buffer_size`: a region advertised in a 32-bit RemoteBuf length.
const MAX_BUFFER: u64 = u32::MAX as u64;
/// The largest `recv_size`.
const MAX_RECV: u64 = 16 << 20;
/// The largest IRD/ORD (14 bits).
const MAX_IRD_ORD: u64 = 0x3FFF;

/// Everything iwarpd can be told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Where the daemon listens (required to serve).
    pub(crate) listen: Option<SocketAddr>,
    /// Octets of remote-accessible memory registered per connection.
    pub(crate) buffer_size: u32,
    /// Receives kept posted per connection.
    pub(crate) recv_depth: u32,
    /// Octets per receive.
    pub(crate) recv_size: u32,
    /// Connections served at once.
    pub(crate) max_qps: usize,
    /// Connections served at once from one IP address.
    pub(crate) max_qps_per_address: usize,
    /// Connections in the MPA handshake at once.
    pub(crate) max_pending_handshakes: usize,
    /// Connections in the MPA handshake at once from one address.
    pub(crate) max_pending_per_address: usize,
    /// Idle limit (`None`: none).
    pub(crate) idle_timeout: Option<Duration>,
    /// Stall limit (`None`: none).
    pub(crate) stall_timeout: Option<Duration>,
    /// TCP keepalive idle time (`None`: off).
    pub(crate) keepalive: Option<Duration>,
    /// Busy polling after a response (zero: off).
    pub(crate) busy_poll: Duration,
    /// MPA C bit.
    pub(crate) crc: bool,
    /// MPA M bit.
    pub(crate) markers: bool,
    /// Offer siw's large-FPDU bit.
    pub(crate) large_fpdus: bool,
    /// This stack's extensions to offer and accept.
    pub(crate) extensions: mpa::Extensions,
    /// MPA revision, 1 or 2.
    pub(crate) mpa_revision: u8,
    /// Local IRD.
    pub(crate) ird: u16,
    /// Local ORD.
    pub(crate) ord: u16,
    /// Ask for peer-to-peer mode as initiator.
    pub(crate) p2p: bool,
    /// TCP connect plus MPA exchange limit.
    pub(crate) connect_timeout: Duration,
    /// Log filter used when RUST_LOG is unset; `None` = the mode's default.
    pub(crate) log: Option<String>,
    /// Capture file of every connection (`None`: no capture).
    pub(crate) pcap: Option<PathBuf>,
    /// The control socket for local applications.
    pub(crate) control: Control,
    /// Threads (shards) serving local applications.
    pub(crate) local_threads: usize,
    pub(crate) max_local_clients: usize,
    /// What one user's local applications may hold together, and all of them.
    pub(crate) max_local_clients_per_user: usize,
    pub(crate) max_local_qps: usize,
    pub(crate) max_local_mrs: usize,
    pub(crate) max_local_mrs_total: usize,
    pub(crate) max_registered: u64,
    /// The deepest queue a local application's queue pair may ask for.
    pub(crate) max_queue_depth: u32,
    /// Octets of each local queue pair's staging area.
    pub(crate) staging_size: u32,
    /// Where this daemon hands its connections to a successor.
    pub(crate) handover: Option<PathBuf>,
    /// The handover socket of the daemon to take the connections from at start.
    pub(crate) take_over: Option<PathBuf>,
    /// Where the Prometheus endpoint listens (`None`: off).
    pub(crate) metrics: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: None,
            buffer_size: 4 << 20,
            recv_depth: 16,
            recv_size: 64 << 10,
            max_qps: 64,
            max_qps_per_address: 16,
            max_pending_handshakes: EngineConfig::MAX_PENDING_HANDSHAKES,
            max_pending_per_address: EngineConfig::MAX_PENDING_PER_ADDRESS,
            idle_timeout: Some(Duration::from_secs(60)),
            stall_timeout: Some(Duration::from_secs(30)),
            keepalive: Some(Duration::from_secs(60)),
            busy_poll: offload_engine::SocketOptions::BUSY_POLL,
            crc: true,
            markers: false,
            large_fpdus: false,
            extensions: mpa::Extensions::ALL,
            mpa_revision: 2,
            ird: 16,
            ord: 16,
            p2p: false,
            connect_timeout: Duration::from_secs(10),
            log: None,
            pcap: None,
            control: Control::Default,
            local_threads: std::thread::available_parallelism().map_or(1, usize::from),
            max_local_clients: LocalConfig::default().max_clients,
            max_local_clients_per_user: LocalConfig::default().max_clients_per_user,
            max_local_qps: LocalConfig::default().max_qps,
            max_local_mrs: LocalConfig::default().max_mrs,
            max_local_mrs_total: LocalConfig::default().max_device_mrs,
            max_registered: LocalConfig::default().max_registered,
            max_queue_depth: LocalConfig::default().max_queue_depth,
            staging_size: LocalConfig::default().staging,
            handover: None,
            take_over: None,
            metrics: None,
        }
    }
}

/// A setting that could not be used: where it came from, and what is wrong with it and
/// how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigError {
    /// `FILE line N` or `--flag`.
    pub(crate) origin: String,
    /// What is wrong and the fix.
    pub(crate) message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Normalizes a key as written (`buffer-size`, `Buffer_Size`) to its canonical form.
pub(crate) fn canonical_key(key: &str) -> String {
    key.trim().to_ascii_lowercase().replace('-', "_")
}

fn known_keys() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

/// One setting as written: its key (canonical), its value and where it came from, with
/// the value's conversions, each refusing what is out of range in the key's own words.
struct Setting<'a> {
    key: &'a str,
    value: &'a str,
    /// `FILE line N` or `--flag`, for errors.
    origin: &'a str,
}

impl Setting<'_> {
    /// An error about this setting.
    fn err(&self, message: String) -> ConfigError {
        ConfigError {
            origin: self.origin.to_owned(),
            message,
        }
    }

    /// The value as a size from 1 to `max` octets.
    fn size(&self, max: u64) -> Result<u64, ConfigError> {
        let (key, value) = (self.key, self.value);
        parse_size(value)
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                self.err(format!(
                    "`{key} = {value}`: expected a size from 1 to {max} octets, as a number \
                     with an optional K, M or G suffix (for example `{key} = 64K`)"
                ))
            })
    }

    /// The value as a whole number from `min` to `max`.
    fn number(&self, min: u64, max: u64) -> Result<u64, ConfigError> {
        let (key, value) = (self.key, self.value);
        value
            .replace('_', "")
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                self.err(format!(
                    "`{key} = {value}`: expected a whole number from {min} to {max}"
                ))
            })
    }

    /// The value as true or false.
    fn boolean(&self) -> Result<bool, ConfigError> {
        let (key, value) = (self.key, self.value);
        parse_bool(value).ok_or_else(|| {
            self.err(format!(
                "`{key} = {value}`: expected true or false (yes/no, on/off, 1/0 work too)"
            ))
        })
    }
}

/// How a config file was written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// TOML.
    Toml,
    /// iwarpd's format before TOML: `key = value` lines with text unquoted.
    Unquoted,
}

/// The 1-based line of byte `at` of `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.get(..at).unwrap_or(text).matches('\n').count() + 1
}

impl Config {
    /// Applies the settings of a config file's text (TOML, or the unquoted form of
    /// earlier versions); `name` names the file in errors. A key given twice is an error
    /// (which line wins would be a guess).
    pub(crate) fn load_str(&mut self, text: &str, name: &str) -> Result<Format, ConfigError> {
        type Entries = std::collections::BTreeMap<Spanned<String>, Spanned<toml::Value>>;
        let entries = match toml::from_str::<Entries>(text) {
            Ok(entries) => entries,
            // Quotes or a [table] header: it was meant as TOML, so TOML's complaint it is.
            Err(e)
                if text.contains(['"', '\''])
                    || text.lines().any(|l| l.trim().starts_with('[')) =>
            {
                let line = e.span().map_or(1, |s| line_of(text, s.start));
                return Err(ConfigError {
                    origin: format!("{name} line {line}"),
                    message: format!(
                        "not valid TOML: {} (text goes in quotes: `listen = \"0.0.0.0:4791\"`)",
                        e.message().trim_end()
                    ),
                });
            }
            Err(_) => {
                self.load_unquoted(text, name)?;
                return Ok(Format::Unquoted);
            }
        };
        let mut entries: Vec<_> = entries.into_iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (key, value) in entries {
            let line = line_of(text, key.span().start);
            let origin = format!("{name} line {line}");
            let key = canonical_key(key.get_ref());
            if let Some(first) = seen.insert(key.clone(), line) {
                return Err(ConfigError {
                    origin,
                    message: format!(
                        "`{key}` is already set on line {first}: keep only one of the two lines"
                    ),
                });
            }
            let value = match value.into_inner() {
                toml::Value::String(s) => s,
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) => b.to_string(),
                _ => {
                    return Err(ConfigError {
                        origin,
                        message: format!(
                            "`{key}` takes one value (a number, true/false or text in quotes), \
                             not a list, a table or a date"
                        ),
                    });
                }
            };
            self.set(&key, &value, &origin)?;
        }
        Ok(Format::Toml)
    }

    /// Applies a file in the unquoted `key = value` form of earlier versions.
    fn load_unquoted(&mut self, text: &str, name: &str) -> Result<(), ConfigError> {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line_no = i + 1;
            let origin = format!("{name} line {line_no}");
            let line = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
            if line.is_empty() {
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                return Err(ConfigError {
                    origin,
                    message: format!(
                        "`{line}` is not a setting: write `key = value` (for example \
                         `buffer_size = 4M`), or start the line with # to make it a comment"
                    ),
                });
            };
            let key = canonical_key(key);
            if let Some(first) = seen.insert(key.clone(), line_no) {
                return Err(ConfigError {
                    origin,
                    message: format!(
                        "`{key}` is already set on line {first}: keep only one of the two lines"
                    ),
                });
            }
            self.set(&key, value.trim(), &origin)?;
        }
        Ok(())
    }

    /// Applies one setting. `origin` names where it came from in errors.
    pub(crate) fn set(&mut self, key: &str, value: &str, origin: &str) -> Result<(), ConfigError> {
        let key = canonical_key(key);
        let v = Setting {
            key: &key,
            value,
            origin,
        };
        if value.is_empty() {
            return Err(v.err(format!(
                "`{key}` has no value: write `{key} = VALUE` ({})",
                describe(&key).unwrap_or("see the documentation")
            )));
        }
        self.apply(&v)
    }

    /// Applies the setting `v` (its key canonical, its value not empty).
    fn apply(&mut self, v: &Setting<'_>) -> Result<(), ConfigError> {
        let (key, value) = (v.key, v.value);
        // The conversions below cannot fail: `Setting` range-checks every value.
        match key {
            "listen" => {
                self.listen = Some(value.parse().map_err(|_| {
                    v.err(format!(
                        "`listen = {value}`: expected IP:PORT, for example `0.0.0.0:4791` or \
                         `[::]:4791` (use port 0 to let the system pick one)"
                    ))
                })?);
            }
            "buffer_size" => self.buffer_size = v.size(MAX_BUFFER)? as u32,
            "recv_size" => self.recv_size = v.size(MAX_RECV)? as u32,
            "recv_depth" => self.recv_depth = v.number(1, 4096)? as u32,
            "max_qps" => self.max_qps = v.number(1, 1 << 20)? as usize,
            "max_qps_per_address" => self.max_qps_per_address = v.number(1, 1 << 20)? as usize,
            "max_pending_handshakes" => {
                self.max_pending_handshakes = v.number(1, 1 << 20)? as usize;
            }
            "max_pending_per_address" => {
                self.max_pending_per_address = v.number(1, 1 << 20)? as usize;
            }
            "idle_timeout" => self.idle_timeout = seconds(v.number(0, 1 << 20)?),
            "stall_timeout" => self.stall_timeout = seconds(v.number(0, 1 << 20)?),
            "keepalive" => self.keepalive = seconds(v.number(0, 1 << 20)?),
            "busy_poll_us" => self.busy_poll = Duration::from_micros(v.number(0, 1_000_000)?),
            "crc" => self.crc = v.boolean()?,
            "markers" => self.markers = v.boolean()?,
            "large_fpdus" => self.large_fpdus = v.boolean()?,
            "extensions" => {
                self.extensions = mpa::Extensions::parse_list(value).map_err(|e| v.err(e))?
            }
            "p2p" => self.p2p = v.boolean()?,
            "mpa_revision" => self.mpa_revision = v.number(1, 2)? as u8,
            "ird" => self.ird = v.number(0, MAX_IRD_ORD)? as u16,
            "ord" => self.ord = v.number(0, MAX_IRD_ORD)? as u16,
            "connect_timeout" => {
                self.connect_timeout = Duration::from_secs(v.number(1, 3600)?);
            }
            "log" => {
                EnvFilter::try_new(value).map_err(|e| {
                    v.err(format!(
                        "`log = {value}` is not a log filter ({e}): write a level such as \
                         `info` or `debug`, or `target=level` pairs separated by commas"
                    ))
                })?;
                self.log = Some(value.to_owned());
            }
            "pcap" => self.pcap = Some(PathBuf::from(value)),
            "handover" => self.handover = Some(PathBuf::from(value)),
            "take_over" => self.take_over = Some(PathBuf::from(value)),
            "metrics" => {
                self.metrics = match value {
                    "off" | "none" | "false" => None,
                    addr => Some(addr.parse().map_err(|_| {
                        v.err(format!(
                            "`metrics = {addr}`: expected an address and port to serve the \
                             metrics on, for example `metrics = 127.0.0.1:9464`, or `off`"
                        ))
                    })?),
                }
            }
            "local_threads" => self.local_threads = v.number(1, 256)? as usize,
            "max_local_clients" => self.max_local_clients = v.number(1, 65536)? as usize,
            "max_local_clients_per_user" => {
                self.max_local_clients_per_user = v.number(1, 65536)? as usize;
            }
            "max_local_qps" => self.max_local_qps = v.number(1, 1 << 20)? as usize,
            "max_local_mrs" => {
                self.max_local_mrs = v.number(1, u64::from(rdmap::STag::MAX_INDEX))? as usize;
            }
            "max_local_mrs_total" => {
                self.max_local_mrs_total = v.number(1, u64::from(rdmap::STag::MAX_INDEX))? as usize;
            }
            "max_registered" => self.max_registered = v.size(u64::MAX)?,
            "max_queue_depth" => {
                self.max_queue_depth = v.number(1, u64::from(ipc::qpseg::MAX_DEPTH))? as u32;
            }
            "staging_size" => {
                let n = v.size(u64::from(ipc::qpseg::MAX_STAGING))?;
                if n < 64 << 10 || !n.is_multiple_of(64) {
                    return Err(v.err(format!(
                        "`staging_size = {value}`: expected a multiple of 64 octets from 64K \
                         to 64M (for example `staging_size = 8M`)"
                    )));
                }
                self.staging_size = n as u32;
            }
            "control" => {
                self.control = match value {
                    "off" | "none" | "false" => Control::Off,
                    "default" => Control::Default,
                    path => Control::Path(PathBuf::from(path)),
                }
            }
            _ => {
                let guess = crate::suggest::nearest(key, KEYS.iter().map(|(k, _)| *k))
                    .map(|k| format!(" did you mean `{k}`?"))
                    .unwrap_or_default();
                return Err(v.err(format!(
                    "unknown setting `{key}`;{guess} the known ones are: {}",
                    known_keys()
                )));
            }
        }
        Ok(())
    }

    /// The capture `pcap` asks for, if any: the file created (truncated), or with
    /// `append` continued (a successor goes on with the capture of the daemon before). Make
    /// it once and give every engine of the process a clone ([`Self::engine_with`]): one
    /// writer per file.
    pub(crate) fn capture(&self, append: bool) -> Result<Option<CaptureTap>, String> {
        let Some(path) = &self.pcap else {
            return Ok(None);
        };
        let tap = if append {
            CaptureTap::append(path)
        } else {
            CaptureTap::create(path)
        };
        tap.map(Some).map_err(|e| {
            format!("cannot capture: {e} (check the `pcap` path, or leave `pcap` out)")
        })
    }

    /// The engine settings, capturing to `tap` (from [`Self::capture`]).
    pub(crate) fn engine_with(&self, tap: Option<CaptureTap>) -> EngineConfig {
        let mut cfg = self.engine_config();
        cfg.pcap = tap;
        cfg
    }

    /// The engine settings these values ask for (without the capture file).
    pub(crate) fn engine_config(&self) -> EngineConfig {
        let mut cfg = EngineConfig::default();
        cfg.mpa.rev = self.mpa_revision;
        cfg.mpa.crc = self.crc;
        cfg.mpa.markers = self.markers;
        cfg.mpa.large_fpdus = self.large_fpdus;
        cfg.mpa.extensions = self.extensions;
        cfg.mpa.ird = self.ird;
        cfg.mpa.ord = self.ord;
        cfg.mpa.p2p = self.p2p;
        cfg.mpa.timeout = self.connect_timeout;
        cfg.connect_timeout = self.connect_timeout;
        cfg.max_pending_handshakes = self.max_pending_handshakes;
        cfg.max_pending_per_address = self.max_pending_per_address;
        cfg.timeouts.idle = self.idle_timeout;
        cfg.timeouts.stall = self.stall_timeout;
        cfg.socket.keepalive = self.keepalive;
        cfg.socket.busy_poll = self.busy_poll;
        // Posted receives must fit the receive queue.
        cfg.stream.rq_depth = cfg.stream.rq_depth.max(self.recv_depth as usize);
        cfg
    }
}

/// The keys a config file's text sets, each with its origin (`FILE line N`), for a text
/// that [`Config::load_str`] accepted.
pub(crate) fn keys_in_file(text: &str, name: &str) -> Vec<(String, String)> {
    type Entries = std::collections::BTreeMap<Spanned<String>, toml::Value>;
    match toml::from_str::<Entries>(text) {
        Ok(entries) => entries
            .keys()
            .map(|k| {
                let line = line_of(text, k.span().start);
                (canonical_key(k.get_ref()), format!("{name} line {line}"))
            })
            .collect(),
        // The unquoted form of earlier versions.
        Err(_) => text
            .lines()
            .enumerate()
            .filter_map(|(i, raw)| {
                let line = raw.split_once('#').map_or(raw, |(before, _)| before);
                let (key, _) = line.split_once('=')?;
                Some((canonical_key(key), format!("{name} line {}", i + 1)))
            })
            .collect(),
    }
}

/// `n` seconds, or `None` for 0 (no limit).
fn seconds(n: u64) -> Option<Duration> {
    (n > 0).then(|| Duration::from_secs(n))
}

/// What a key means, for error messages.
fn describe(key: &str) -> Option<&'static str> {
    KEYS.iter().find(|(k, _)| *k == key).map(|(_, d)| *d)
}

/// `4096`, `64K`, `1M`, `1_048_576`, `2GiB` -> octets.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits);
    let num: u64 = num.parse().ok()?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return None,
    };
    num.checked_mul(1 << shift)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" | "1" => Some(true),
        "false" | "no" | "off" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        let mut c = Config::default();
        c.load_str(text, "test.conf")?;
        Ok(c)
    }

    #[test]
    fn a_full_file_sets_every_key() {
        let c = load(
            "# iwarpd test\n\
             listen = 127.0.0.1:4791  # trailing comment\n\
             \n\
             buffer_size = 8M\n\
             recv-depth = 32\n\
             recv_size = 4K\n\
             max_qps = 3\n\
             max_qps_per_address = 2\n\
             max_pending_handshakes = 9\n\
             max-pending-per-address = 4\n\
             idle_timeout = 0\n\
             stall_timeout = 7\n\
             keepalive = 0\n\
             crc = off\n\
             markers = yes\n\
             large-fpdus = on\n\
             mpa_revision = 1\n\
             IRD = 4\n\
             ord = 0\n\
             p2p = true\n\
             connect_timeout = 3\n\
             log = offload_engine=debug\n\
             pcap = /tmp/iwarpd.pcapng\n\
             control = /tmp/iwarpd-test.sock\n\
             local_threads = 3\n\
             max_local_clients = 5\n\
             max_queue_depth = 4096\n\
             extensions = send_imm\n",
        )
        .unwrap();
        assert_eq!(c.listen, Some("127.0.0.1:4791".parse().unwrap()));
        assert_eq!(
            (c.buffer_size, c.recv_depth, c.recv_size),
            (8 << 20, 32, 4096)
        );
        assert_eq!((c.max_qps, c.max_qps_per_address), (3, 2));
        assert_eq!(
            (c.idle_timeout, c.stall_timeout, c.keepalive),
            (None, Some(Duration::from_secs(7)), None)
        );
        assert!(!c.crc && c.markers && c.large_fpdus && c.p2p);
        assert_eq!((c.mpa_revision, c.ird, c.ord), (1, 4, 0));
        assert_eq!(c.connect_timeout, Duration::from_secs(3));
        assert_eq!(c.log.as_deref(), Some("offload_engine=debug"));
        assert_eq!(c.pcap, Some(PathBuf::from("/tmp/iwarpd.pcapng")));
        assert_eq!(
            c.control,
            Control::Path(PathBuf::from("/tmp/iwarpd-test.sock"))
        );
        assert_eq!(load("control = off\n").unwrap().control, Control::Off);
        assert_eq!(c.extensions, mpa::Extensions::SEND_IMMEDIATE);
        assert_eq!(
            c.engine_config().mpa.extensions,
            mpa::Extensions::SEND_IMMEDIATE
        );
        let e = load("extensions = imm\n").unwrap_err().to_string();
        assert!(e.contains("`imm`") && e.contains("send_imm"), "{e}");
        assert_eq!((c.local_threads, c.max_local_clients), (3, 5));
        assert_eq!(c.max_queue_depth, 4096);
        assert_eq!(load("staging_size = 8M\n").unwrap().staging_size, 8 << 20);
        for bad in ["32K", "65M", "100001"] {
            let e = load(&format!("staging_size = {bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("staging_size"), "{bad}: {e}");
        }
        assert!(
            load("max_queue_depth = 65537\n").is_err(),
            "beyond the rings' limit"
        );
        assert!(load("local_threads = 0\n").is_err(), "at least one thread");
        let e = c.engine_config();
        assert_eq!((e.mpa.rev, e.mpa.crc, e.mpa.markers), (1, false, true));
        assert!(e.mpa.large_fpdus);
        assert_eq!((e.mpa.ird, e.mpa.ord, e.mpa.p2p), (4, 0, true));
        assert_eq!(e.connect_timeout, Duration::from_secs(3));
        assert_eq!(
            (e.max_pending_handshakes, e.max_pending_per_address),
            (9, 4)
        );
        assert_eq!(
            (e.timeouts.idle, e.timeouts.stall, e.socket.keepalive),
            (None, Some(Duration::from_secs(7)), None)
        );
    }

    #[test]
    fn the_example_file_parses_to_the_defaults() {
        let c = load(include_str!("iwarpd.conf")).unwrap();
        let expect = Config {
            listen: Some("0.0.0.0:4791".parse().unwrap()),
            log: Some("info".into()),
            ..Config::default()
        };
        assert_eq!(c, expect);
        // A key without a default (pcap) is shown commented out.
        for (key, _) in KEYS {
            let set = include_str!("iwarpd.conf").lines().any(|l| {
                let l = l.trim_start_matches(['#', ' ']);
                l.split('=').next().is_some_and(|k| k.trim() == *key)
            });
            assert!(set, "the example shows `{key}`");
        }
    }

    #[test]
    fn toml_values_of_every_kind() {
        let text = "# TOML\n\
                    listen = \"127.0.0.1:4791\"\n\
                    buffer_size = \"8M\"\n\
                    recv_size = 4_096\n\
                    crc = false\n\
                    large-fpdus = \"on\"\n\
                    log = \"offload_engine=debug,info\"  # a comment\n";
        let mut c = Config::default();
        assert_eq!(c.load_str(text, "t.toml"), Ok(Format::Toml));
        assert_eq!(c.listen, Some("127.0.0.1:4791".parse().unwrap()));
        assert_eq!((c.buffer_size, c.recv_size), (8 << 20, 4096));
        assert!(!c.crc && c.large_fpdus);
        assert_eq!(c.log.as_deref(), Some("offload_engine=debug,info"));
        // The unquoted form of earlier versions still loads, and says so.
        let mut old = Config::default();
        let unquoted = "listen = 127.0.0.1:4791\nbuffer_size = 8M\n";
        assert_eq!(old.load_str(unquoted, "old.conf"), Ok(Format::Unquoted));
        assert_eq!((old.listen, old.buffer_size), (c.listen, c.buffer_size));
    }

    #[test]
    fn toml_errors_name_the_line() {
        // Not TOML (an unclosed quote): TOML's message, on its line.
        let e = load("crc = true\nlisten = \"0.0.0.0:1\nlog = \"info\"\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 2", "{e}");
        assert!(e.message.starts_with("not valid TOML"), "{e}");
        // TOML, but a value iwarpd cannot use: its own message, on the key's line.
        let e = load("crc = true\n\nbuffer_size = \"12Q\"\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 3", "{e}");
        assert!(e.message.contains("K, M or G"), "{e}");
        let e = load("listen = [\"0.0.0.0:1\"]\n").unwrap_err();
        assert!(e.message.contains("not a list"), "{e}");
        let e = load("bufsize = \"1M\"\n").unwrap_err();
        assert!(e.message.contains("unknown setting `bufsize`"), "{e}");
        // One key twice, written two ways.
        let e = load("recv_depth = 4\nrecv-depth = 8\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 2", "{e}");
        assert!(e.message.contains("already set on line 1"), "{e}");
    }

    #[test]
    fn the_keys_a_file_sets_are_named_with_their_lines() {
        let toml = "# c\ncrc = false\n\nbuffer-size = \"1M\"\n";
        assert_eq!(
            keys_in_file(toml, "a.conf"),
            [
                ("buffer_size".to_owned(), "a.conf line 4".to_owned()),
                ("crc".to_owned(), "a.conf line 2".to_owned())
            ]
        );
        let old = "listen = 0.0.0.0:1  # x\n# crc = true\nmax_qps = 3\n";
        assert_eq!(
            keys_in_file(old, "b.conf"),
            [
                ("listen".to_owned(), "b.conf line 1".to_owned()),
                ("max_qps".to_owned(), "b.conf line 3".to_owned())
            ]
        );
        assert_eq!(
            load("control = default\n").unwrap().control,
            Control::Default
        );
    }

    #[test]
    fn an_empty_file_keeps_the_defaults() {
        assert_eq!(load("\n# nothing\n   \n").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_line_and_the_fix() {
        let e = load("crc = true\nbuffer_size = 12Q\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 2");
        assert!(e.message.contains("K, M or G"), "{e}");
        assert!(
            e.to_string()
                .starts_with("test.conf line 2: `buffer_size = 12Q`")
        );

        let e = load("\n\nbufsize = 1M\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 3");
        assert!(e.message.contains("unknown setting `bufsize`"), "{e}");
        assert!(e.message.contains("did you mean `buffer_size`?"), "{e}");
        let e = load("crc = true\nrecv_deph = 4\n").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "test.conf line 2: unknown setting `recv_deph`; did you mean `recv_depth`?"
            ),
            "{e}"
        );
        let e = load("colour = \"blue\"\n").unwrap_err();
        assert!(!e.message.contains("did you mean"), "nothing near: {e}");
        assert!(
            e.message.contains("buffer_size"),
            "lists the known keys: {e}"
        );

        let e = load("listen 0.0.0.0:1\n").unwrap_err();
        assert!(e.message.contains("`key = value`"), "{e}");

        let e = load("crc = maybe\n").unwrap_err();
        assert!(e.message.contains("true or false"), "{e}");

        let e = load("ird = 20000\n").unwrap_err();
        assert!(e.message.contains("from 0 to 16383"), "{e}");

        let e = load("mpa_revision = 3\n").unwrap_err();
        assert!(e.message.contains("from 1 to 2"), "{e}");

        let e = load("listen = localhost\n").unwrap_err();
        assert!(e.message.contains("IP:PORT"), "{e}");

        let e = load("recv_size =\n").unwrap_err();
        assert!(e.message.contains("has no value"), "{e}");

        let e = load("log = [[[\n").unwrap_err();
        assert!(e.message.contains("not a log filter"), "{e}");
    }

    #[test]
    fn a_key_given_twice_names_both_lines() {
        let e = load("crc = true\n# x\ncrc = false\n").unwrap_err();
        assert_eq!(e.origin, "test.conf line 3");
        assert!(e.message.contains("line 1"), "{e}");
        // Spelled differently, still the same key.
        assert!(load("max_qps = 1\nmax-qps = 2\n").is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let mut c = load("buffer_size = 8M\ncrc = true\n").unwrap();
        c.set("buffer-size", "1M", "--buffer-size").unwrap();
        c.set("crc", "false", "--crc").unwrap();
        assert_eq!((c.buffer_size, c.crc), (1 << 20, false));
        let e = c.set("colour", "blue", "--colour").unwrap_err();
        assert_eq!(e.origin, "--colour");
    }

    #[test]
    fn sizes_and_limits() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("64kib"), Some(64 << 10));
        assert_eq!(parse_size("1_048_576"), Some(1 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("1T"), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        // A region larger than a RemoteBuf can name is refused.
        assert!(load("buffer_size = 4G\n").is_err());
        assert!(load("buffer_size = 0\n").is_err());
        assert_eq!(
            load("buffer_size = 4095M\n").unwrap().buffer_size,
            4095 << 20
        );
    }

    #[test]
    fn deep_receive_queues_grow_the_stream() {
        let c = load("recv_depth = 1000\n").unwrap();
        assert!(c.engine_config().stream.rq_depth >= 1000);
    }
}
