//! `iwperf` command line: perftest's flags, short and long, parsed by `clap`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use verbs::{DeviceConfig, Extensions, RtrFlags};

use crate::args::parse_size;

/// What `--help` says after the flags.
const AFTER_HELP: &str = "\
Runs perftest's ib_<TEST> over this iWARP stack, speaking perftest's rdma_cm (-R)
exchange, so either side may be Linux siw running perftest with the same flags.
No address: server (listens on [::], IPv6 and IPv4 clients alike; exits when its
test is done). With an address: client. Two iwperf check that they run the same test and settings.
A progress line goes to stderr (when it is a terminal) for runs over 2 seconds.";

/// The command line as `clap` reads it; [`Opts::parse`] checks it and turns it into
/// [`Opts`].
#[derive(Parser, Debug)]
#[command(
    name = "iwperf",
    version,
    about = "perftest's ib_*_bw / ib_*_lat over iWARP"
)]
#[command(after_help = AFTER_HELP, max_term_width = 100)]
struct Cli {
    /// The test: write_bw, read_bw, send_bw, write_lat, read_lat, send_lat, atomic_bw
    /// or atomic_lat.
    #[arg(value_enum, hide_possible_values = true)]
    test: Option<Test>,
    /// The server's address or host name (client role); none: server role.
    server: Option<String>,
    /// Message size [default: 65536 for *_bw, 2 for *_lat]
    #[arg(short = 's', long = "size", value_name = "SIZE", value_parser = size_arg)]
    size: Option<usize>,
    /// All sizes 2, 4, ... 2^23, one result line each.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// The largest size -a runs (for quick runs).
    #[arg(long = "max-size", hide = true, value_parser = size_arg, default_value_t = MAX_ALL_SIZE)]
    max_size: usize,
    /// Iterations [default: 5000 for write_bw, 1000 otherwise]
    #[arg(short = 'n', long = "iters", value_name = "ITERS")]
    iters: Option<u64>,
    /// Run for SECS seconds instead of -n iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECS")]
    duration: Option<u64>,
    /// Operations in flight per QP in *_bw.
    #[arg(short = 't', long = "tx-depth", value_name = "DEPTH", default_value_t = DEFAULT_TX_DEPTH)]
    tx_depth: usize,
    /// Inline size: accepted and recorded only (this stack has no separate inline
    /// limit; every message is sent the same way).
    #[arg(short = 'I', long = "inline_size", value_name = "SIZE", value_parser = parse_size_any, default_value_t = 0)]
    inline_size: usize,
    /// *_lat: sleep until each completion arrives (completion events) instead of
    /// polling busily, perftest's default.
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// atomic_*: the Atomic to run.
    #[arg(
        short = 'A',
        long = "atomic_type",
        value_enum,
        default_value = "FETCH_AND_ADD"
    )]
    atomic_type: AtomicOp,
    /// *_bw: both sides run the test toward each other at once; the line is the sum
    /// (perftest's bidirectional test).
    #[arg(short = 'b', long = "bidirectional")]
    bidirectional: bool,
    /// *_bw: run until interrupted (Ctrl-C), a result line every -D seconds
    /// [default: 5].
    #[arg(long = "run_infinitely")]
    run_infinitely: bool,
    /// Print only one number per result line: bandwidth or message_rate (*_bw),
    /// latency (*_lat, the typical one), as perftest's --output does.
    #[arg(long = "output", value_enum, value_name = "WHAT")]
    output: Option<Output>,
    /// read_*, atomic_*: RDMA Reads or Atomics outstanding at once per QP (the IRD/ORD
    /// offered in MPA) [default: 16; at most 128]
    #[arg(short = 'o', long = "outs", value_name = "N")]
    outs: Option<u16>,
    /// *_bw: N test connections, each running the test, results summed.
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1)]
    qps: usize,
    /// Port.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    port: u16,
    /// Accepted (rdma_cm is the only mode).
    #[arg(short = 'R', long = "rdma_cm")]
    rdma_cm: bool,
    /// Accepted and ignored.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Accepted and ignored (the device is this stack).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    ib_dev: Option<String>,
    /// Report Gb/s instead of MB/s.
    #[arg(long = "report_gbits")]
    report_gbits: bool,
    /// One JSON object per result line instead of the table.
    #[arg(long = "json")]
    json: bool,
    /// Ask for MPA CRC.
    #[arg(long = "crc")]
    crc: bool,
    /// Offer FPDUs larger than one TCP segment (siw's experimental MPA bit; used only
    /// if the peer offers it too: another iwperf with this flag, or siw built with
    /// try_gso).
    #[arg(long = "large-fpdus")]
    large_fpdus: bool,
    /// Client: wait MS after each MPA Reply before the first FPDU (siw hazard A; 0 = off).
    #[arg(long = "first-delay", value_name = "MS", default_value_t = 200)]
    first_delay: u64,
    /// Per-step timeout in seconds.
    #[arg(long = "timeout", value_name = "SECS", default_value_t = 30)]
    timeout: u64,
    /// Client: how long to keep trying while nothing listens at the server's address
    /// (perftest's client gives up after about 1 s too); raise it when starting both
    /// sides at once.
    #[arg(long = "connect-wait", value_name = "SECS", default_value_t = 1)]
    connect_wait: u64,
    /// Go through the local iwarpd listening on this control socket
    /// (IWARP_DEVICE=unix:PATH does the same; the daemon's MPA settings, CRC
    /// included, then apply).
    #[arg(long = "daemon", value_name = "PATH")]
    daemon: Option<std::path::PathBuf>,
    /// Send every request through the send queue, never seed 000's push path.
    #[arg(long = "no-push")]
    no_push: bool,
    /// send_lat: every Send carries a 32-bit immediate value (this stack's Send with
    /// Immediate Data; both sides need it agreed).
    #[arg(long = "imm")]
    imm: bool,
    /// write_bw/send_bw client: payloads are owned `Bytes` (verbs' `Payload::Bytes`, as
    /// `qp.write(bytes, ..)` sends), not gather entries of the registered buffer. Through
    /// iwarpd they travel by the queue pair's staging area (1 MiB: larger ones are refused).
    #[arg(long = "bytes")]
    bytes: bool,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (none: standard iWARP only, which Wireshark decodes).
    #[arg(long = "extensions", value_name = "LIST", default_value = "all", value_parser = crate::args::extensions)]
    extensions: Extensions,
}

/// perftest's `-A`: which RFC 7306 Atomic the atomic tests run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum AtomicOp {
    /// Fetch and Add (adds 1).
    #[value(name = "FETCH_AND_ADD")]
    FetchAdd,
    /// Compare and Swap (compares with 0, swaps in 0: the word stays as it is).
    #[value(name = "CMP_AND_SWAP")]
    CmpSwap,
}

/// perftest's `--output`: what a result line is reduced to.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// The average bandwidth (MB/s, or Gb/s with `--report_gbits`).
    #[value(name = "bandwidth")]
    Bandwidth,
    /// The message rate (Mpps).
    #[value(name = "message_rate")]
    MessageRate,
    /// The typical latency (usec).
    #[value(name = "latency")]
    Latency,
}

/// How often `--run_infinitely` prints a line without `-D` (perftest's default).
pub const INFINITE_INTERVAL: Duration = Duration::from_secs(5);

fn size_arg(text: &str) -> Result<usize, String> {
    parse_size(text)
        .filter(|&s| (1..=(1 << 30)).contains(&s))
        .ok_or_else(|| format!("{text:?} is not a size from 1 to 1G (65536, 64K, 1M)"))
}

fn parse_size_any(text: &str) -> Result<usize, String> {
    parse_size(text).ok_or_else(|| format!("{text:?} is not a size (220, 1K)"))
}

/// The octets an Atomic works on (RFC 7306).
pub const ATOMIC_SIZE: usize = 8;

/// The largest size `-a` runs (perftest's 2^23).
pub const MAX_ALL_SIZE: usize = 1 << 23;

/// perftest's default TX depth for the bandwidth tests.
pub const DEFAULT_TX_DEPTH: usize = 128;

/// Send and receive queue depth: room for perftest's TX depth (128) and RX depth
/// (up to 512 receives pre-posted for `send_bw`).
pub const QUEUE_DEPTH: usize = 1024;

/// Which perftest test.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// `ib_write_bw`: the client RDMA Writes into the server's buffer.
    #[value(name = "write_bw")]
    WriteBw,
    /// `ib_read_bw`: the client RDMA Reads the server's buffer.
    #[value(name = "read_bw")]
    ReadBw,
    /// `ib_send_bw`: the client Sends, the server receives and RDMA Writes credits.
    #[value(name = "send_bw")]
    SendBw,
    /// `ib_write_lat`: RDMA Write ping-pong; each side polls the last octet of its buffer.
    #[value(name = "write_lat")]
    WriteLat,
    /// `ib_read_lat`: the client RDMA Reads the server's buffer, one Read at a time.
    #[value(name = "read_lat")]
    ReadLat,
    /// `ib_send_lat`: Send ping-pong into pre-posted receives.
    #[value(name = "send_lat")]
    SendLat,
    /// `ib_atomic_bw`: the client runs RFC 7306 Atomics (`-A`) on the server's buffer.
    #[value(name = "atomic_bw")]
    AtomicBw,
    /// `ib_atomic_lat`: the client runs Atomics one at a time.
    #[value(name = "atomic_lat")]
    AtomicLat,
}

impl Test {
    /// Every test, in help order.
    pub const ALL: [Self; 8] = [
        Self::WriteBw,
        Self::ReadBw,
        Self::SendBw,
        Self::WriteLat,
        Self::ReadLat,
        Self::SendLat,
        Self::AtomicBw,
        Self::AtomicLat,
    ];

    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Self::WriteBw => "write_bw",
            Self::ReadBw => "read_bw",
            Self::SendBw => "send_bw",
            Self::WriteLat => "write_lat",
            Self::ReadLat => "read_lat",
            Self::SendLat => "send_lat",
            Self::AtomicBw => "atomic_bw",
            Self::AtomicLat => "atomic_lat",
        }
    }

    /// perftest's title for the test.
    pub fn title(self) -> &'static str {
        match self {
            Self::WriteBw => "RDMA_Write BW Test",
            Self::ReadBw => "RDMA_Read BW Test",
            Self::SendBw => "Send BW Test",
            Self::WriteLat => "RDMA_Write Latency Test",
            Self::ReadLat => "RDMA_Read Latency Test",
            Self::SendLat => "Send Latency Test",
            Self::AtomicBw => "Atomic BW Test",
            Self::AtomicLat => "Atomic Latency Test",
        }
    }

    /// A latency test.
    pub fn is_lat(self) -> bool {
        matches!(
            self,
            Self::WriteLat | Self::ReadLat | Self::SendLat | Self::AtomicLat
        )
    }

    /// An Atomic test (its messages are 8 octets).
    pub fn is_atomic(self) -> bool {
        matches!(self, Self::AtomicBw | Self::AtomicLat)
    }

    /// The `out_reads` value siw's perftest advertises for this test.
    pub fn out_reads(self) -> u32 {
        if self.reads() { 128 } else { 1 }
    }

    /// The test runs RDMA Reads or Atomics, whose outstanding number `-o` sets.
    pub fn reads(self) -> bool {
        matches!(
            self,
            Self::ReadBw | Self::ReadLat | Self::AtomicBw | Self::AtomicLat
        )
    }

    /// The IRD/ORD to offer in MPA: what siw's perftest offers (0/0, or 128/128 for
    /// the read tests; we offer 16/16 for those).
    pub fn ird_ord(self) -> (u16, u16) {
        if self.reads() { (16, 16) } else { (0, 0) }
    }

    /// What a latency sample is divided by: perftest reports half the round trip of
    /// the ping-pong tests and the whole time of a Read.
    pub fn rtt_factor(self) -> f64 {
        if matches!(self, Self::ReadLat | Self::AtomicLat) {
            1.0
        } else {
            2.0
        }
    }
}

/// Parsed options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opts {
    /// The test.
    pub test: Test,
    /// Message size (`-s`).
    pub size: usize,
    /// `-a`: every size from 2 to [`Self::max_size`].
    pub all_sizes: bool,
    /// The largest size `-a` runs ([`MAX_ALL_SIZE`]; the hidden `--max-size` lowers it).
    pub max_size: usize,
    /// Iterations.
    pub iters: u64,
    /// `-D`: run for this long instead of `iters` iterations.
    pub duration: Option<Duration>,
    /// `-t`: operations in flight per QP in the bandwidth tests.
    pub tx_depth: usize,
    /// `-I`: recorded only.
    pub inline_size: usize,
    /// `-q`: test connections (bandwidth tests).
    pub qps: usize,
    /// `-o`: Reads or Atomics outstanding at once (read and atomic tests); `None`: the
    /// test's default ([`Test::ird_ord`]).
    pub outs: Option<u16>,
    /// `-e`: the latency tests wait for completion events instead of polling busily.
    pub events: bool,
    /// Port.
    pub port: u16,
    /// Server address (client role), or `None` (server role).
    pub server: Option<IpAddr>,
    /// `--report_gbits`.
    pub gbits: bool,
    /// `--json`.
    pub json: bool,
    /// `--crc`.
    pub crc: bool,
    /// `--large-fpdus`.
    pub large_fpdus: bool,
    /// `--first-delay`.
    pub first_delay: Duration,
    /// Per-step timeout.
    pub timeout: Duration,
    /// `--connect-wait`: how long the client retries a refused first connection.
    pub connect_wait: Duration,
    /// `--daemon PATH`: go through the local iwarpd at this control socket.
    pub daemon: Option<std::path::PathBuf>,
    /// `--no-push`: never use the push path (through iwarpd or embedded).
    pub no_push: bool,
    /// `--imm`: Sends with Immediate Data.
    pub imm: bool,
    /// `--bytes`: payloads as owned `Bytes`.
    pub bytes: bool,
    /// `--extensions`: this stack's extensions offered and accepted.
    pub extensions: Extensions,
    /// `-b`: both sides run the test (bandwidth tests).
    pub bidirectional: bool,
    /// `--run_infinitely`: run until interrupted, a line every [`Self::duration`].
    pub infinitely: bool,
    /// `--output`: one number per line instead of the table.
    pub output: Option<Output>,
    /// `-A`: the atomic tests' Atomic.
    pub atomic: AtomicOp,
}

impl Opts {
    /// The defaults for `test`.
    pub fn new(test: Test) -> Self {
        Self {
            test,
            size: match test {
                _ if test.is_atomic() => ATOMIC_SIZE,
                _ if test.is_lat() => 2,
                _ => 65536,
            },
            all_sizes: false,
            max_size: MAX_ALL_SIZE,
            iters: if test == Test::WriteBw { 5000 } else { 1000 },
            duration: None,
            tx_depth: DEFAULT_TX_DEPTH,
            inline_size: 0,
            qps: 1,
            outs: None,
            events: false,
            port: 18515,
            server: None,
            gbits: false,
            json: false,
            crc: false,
            large_fpdus: false,
            first_delay: Duration::from_millis(200),
            timeout: Duration::from_secs(30),
            connect_wait: Duration::from_secs(1),
            daemon: None,
            no_push: false,
            imm: false,
            bytes: false,
            extensions: Extensions::ALL,
            bidirectional: false,
            infinitely: false,
            output: None,
            atomic: AtomicOp::FetchAdd,
        }
    }

    /// Parses `args` (without the program name). Help and `--version` come back as
    /// the `clap` errors that print them (exit status 0); everything else that is
    /// wrong as a usage error naming the flag (exit status 2): `error.exit()` does both.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("iwperf".to_owned()).chain(args))?;
        let usage = |kind, msg: String| Cli::command().error(kind, msg);
        let Some(test) = cli.test else {
            return Err(usage(
                ErrorKind::MissingRequiredArgument,
                "no test given: iwperf TEST [OPTIONS] [SERVER], TEST one of write_bw, \
                 read_bw, send_bw, write_lat, read_lat, send_lat, atomic_bw, atomic_lat"
                    .into(),
            ));
        };
        let server = match cli.server {
            Some(s) => Some(
                crate::args::host("the server address", &s)
                    .map_err(|e| usage(ErrorKind::ValueValidation, e))?,
            ),
            None => None,
        };
        let mut o = Self::new(test);
        o.size = cli.size.unwrap_or(o.size);
        o.iters = cli.iters.unwrap_or(o.iters);
        o.all_sizes = cli.all;
        o.max_size = cli.max_size;
        o.duration = match cli.duration {
            Some(0) => {
                return Err(usage(
                    ErrorKind::ValueValidation,
                    "-D must be at least 1 second".into(),
                ));
            }
            d => d.map(Duration::from_secs),
        };
        o.tx_depth = cli.tx_depth;
        o.inline_size = cli.inline_size;
        o.qps = cli.qps;
        o.outs = match cli.outs {
            // perftest: 0 is the device's most; above it, the most, with a notice.
            Some(0) | None => None,
            Some(n) if n > MAX_OUTS => {
                crate::errln!(
                    "iwperf: -o {n} is above the {MAX_OUTS} outstanding reads this device \
                     takes; using {MAX_OUTS}"
                );
                Some(MAX_OUTS)
            }
            n => n,
        };
        if cli.outs.is_some() && !test.reads() {
            return Err(usage(
                ErrorKind::ArgumentConflict,
                "-o (outstanding reads) is for the read and atomic tests (as in perftest)".into(),
            ));
        }
        o.events = cli.events;
        o.port = cli.port;
        o.server = server;
        o.gbits = cli.report_gbits;
        o.json = cli.json;
        o.crc = cli.crc;
        o.large_fpdus = cli.large_fpdus;
        o.first_delay = Duration::from_millis(cli.first_delay);
        o.timeout = Duration::from_secs(cli.timeout);
        o.connect_wait = Duration::from_secs(cli.connect_wait);
        o.daemon = cli.daemon;
        o.no_push = cli.no_push;
        o.imm = cli.imm;
        o.bytes = cli.bytes;
        o.extensions = cli.extensions;
        o.bidirectional = cli.bidirectional;
        o.infinitely = cli.run_infinitely;
        if o.infinitely && o.duration.is_none() {
            o.duration = Some(INFINITE_INTERVAL);
        }
        o.output = cli.output;
        o.atomic = cli.atomic_type;
        o.check()
            .map_err(|msg| usage(ErrorKind::ArgumentConflict, msg))?;
        Ok(o)
    }

    fn check(&self) -> Result<(), String> {
        if self.iters == 0 {
            return Err("-n must be at least 1".into());
        }
        if self.test.is_lat() && self.iters < 2 && self.duration.is_none() {
            return Err("-n must be at least 2 for a latency test (samples are intervals)".into());
        }
        if !(1..=QUEUE_DEPTH / 2).contains(&self.tx_depth) {
            return Err(format!("-t must be between 1 and {}", QUEUE_DEPTH / 2));
        }
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(format!("-q must be between 1 and {MAX_QPS}"));
        }
        if self.qps > 1 && self.test.is_lat() {
            return Err(
                "-q is for the bandwidth tests; perftest's latency tests use one QP".into(),
            );
        }
        if self.all_sizes && self.duration.is_some() {
            return Err("-a and -D do not go together: -D runs one size (-s)".into());
        }
        if self.test.is_atomic() && (self.size != ATOMIC_SIZE || self.all_sizes) {
            return Err(format!(
                "an Atomic works on {ATOMIC_SIZE} octets: {} takes no -s or -a",
                self.test.name()
            ));
        }
        let bw = !self.test.is_lat();
        if self.bidirectional && !bw {
            return Err("-b is for the bandwidth tests (as in perftest)".into());
        }
        if self.infinitely && !bw {
            return Err("--run_infinitely is for the bandwidth tests (as in perftest)".into());
        }
        if self.infinitely && self.all_sizes {
            return Err("--run_infinitely and -a do not go together: it runs one size".into());
        }
        if self.infinitely && self.bidirectional && self.test == Test::SendBw {
            return Err(
                "--run_infinitely does not run send_bw -b (as in perftest); use write_bw -b".into(),
            );
        }
        match (self.output, bw) {
            (Some(Output::Latency), true) => {
                return Err("--output for a bandwidth test: bandwidth or message_rate".into());
            }
            (Some(Output::Bandwidth | Output::MessageRate), false) => {
                return Err("--output for a latency test: latency".into());
            }
            _ => {}
        }
        if self.output.is_some() && self.json {
            return Err("--output and --json do not go together: pick one".into());
        }
        if self.bytes && !matches!(self.test, Test::WriteBw | Test::SendBw) {
            return Err("--bytes is for write_bw and send_bw".into());
        }
        if self.all_sizes && self.max_size < 2 {
            return Err("--max-size must be at least 2 with -a".into());
        }
        Ok(())
    }

    /// The message sizes to run: `-s`, or with `-a` 2, 4, ... up to [`Self::max_size`].
    pub fn sizes(&self) -> Vec<usize> {
        if self.all_sizes {
            (1..24)
                .map(|i| 1usize << i)
                .filter(|&s| s <= self.max_size)
                .collect()
        } else {
            vec![self.size]
        }
    }

    /// The message size of every round, one result line each: [`Self::sizes`], or with
    /// `--run_infinitely` `-s` over and over; either until the run is interrupted.
    pub fn rounds(&self) -> Box<dyn Iterator<Item = usize> + Send> {
        let sizes: Box<dyn Iterator<Item = usize> + Send> = if self.infinitely {
            Box::new(std::iter::repeat(self.size))
        } else {
            Box::new(self.sizes().into_iter())
        };
        Box::new(sizes.take_while(|_| !super::interrupted()))
    }

    /// What an iwperf peer must run too.
    pub fn settings(&self) -> super::msg::Settings {
        super::msg::Settings {
            test: self.test.name().to_owned(),
            size: (if self.all_sizes {
                self.max_size
            } else {
                self.size
            }) as u64,
            all_sizes: self.all_sizes,
            iters: if self.duration.is_some() || self.infinitely {
                0
            } else {
                self.iters
            },
            duration_ms: self.duration.map_or(0, |d| d.as_millis() as u64),
            qps: self.qps as u32,
            imm: self.imm,
            bidirectional: self.bidirectional,
            infinitely: self.infinitely,
        }
    }

    /// The largest message size of the run (what the buffers are sized for).
    pub fn buf_size(&self) -> usize {
        self.sizes().into_iter().max().unwrap_or(self.size)
    }

    /// The server's address (client role); the server role listens on
    /// [`crate::listen::any_address`] instead.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(
            self.server.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            self.port,
        )
    }

    /// The IRD/ORD offered in MPA: `-o N` as N/N, else the test's ([`Test::ird_ord`]).
    pub fn ird_ord(&self) -> (u16, u16) {
        self.outs.map_or_else(|| self.test.ird_ord(), |n| (n, n))
    }

    /// The `out_reads` of our address messages: `-o`, else what siw's perftest
    /// advertises ([`Test::out_reads`]).
    pub fn out_reads(&self) -> u32 {
        self.outs.map_or_else(|| self.test.out_reads(), u32::from)
    }

    /// The device configuration: MPA revision 2, the IRD/ORD of [`Self::ird_ord`], CRC as
    /// asked.
    pub fn device_config(&self) -> DeviceConfig {
        let (ird, ord) = self.ird_ord();
        let cfg = DeviceConfig::default()
            .mpa_revision(2)
            .ird_ord(ird, ord)
            .crc(self.crc)
            .large_fpdus(self.large_fpdus)
            .markers(false)
            .queue_depths(QUEUE_DEPTH, QUEUE_DEPTH)
            .p2p(false, RtrFlags::NONE)
            .connect_timeout(self.timeout)
            .mpa_timeout(self.timeout)
            .push(!self.no_push)
            .extensions(self.extensions);
        match &self.daemon {
            Some(path) => cfg.daemon(path),
            None => cfg,
        }
    }
}

/// The most outstanding Reads or Atomics `-o` takes (siw's `max_qp_rd_atom`, which
/// iwperf advertises by default as perftest on siw does).
pub const MAX_OUTS: u16 = 128;

/// The most test connections `-q` takes.
pub const MAX_QPS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Opts, clap::Error> {
        Opts::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn perftest_flags() {
        let o = parse("write_bw -d siw0 -F -R -s 4096 -n 16 --report_gbits 10.231.0.11").unwrap();
        assert_eq!(o.test, Test::WriteBw);
        assert_eq!((o.size, o.iters, o.port), (4096, 16, 18515));
        assert!(o.gbits);
        assert_eq!(o.socket_addr(), "10.231.0.11:18515".parse().unwrap());
        let s = parse("read_bw -p 9000").unwrap();
        assert_eq!(
            (s.test, s.server, s.iters, s.port),
            (Test::ReadBw, None, 1000, 9000)
        );
    }

    #[test]
    fn latency_defaults_and_new_flags() {
        let o = parse("write_lat").unwrap();
        assert_eq!((o.size, o.iters, o.qps, o.events), (2, 1000, 1, false));
        assert!(parse("send_lat -e").unwrap().events);
        assert_eq!(o.sizes(), vec![2]);
        let o = parse("send_bw -a -t 64 -I 220 -q 2 --json --max-size 64 1.2.3.4").unwrap();
        assert_eq!(o.sizes(), vec![2, 4, 8, 16, 32, 64]);
        assert_eq!(o.buf_size(), 64);
        let d = parse("write_bw -D 3").unwrap();
        assert_eq!(d.duration, Some(Duration::from_secs(3)));
        assert_eq!((o.tx_depth, o.inline_size, o.qps), (64, 220, 2));
        assert!(o.json);
        let all = parse("read_lat -a").unwrap().sizes();
        assert_eq!((all.len(), all.last()), (23, Some(&(1 << 23))));
        assert_eq!(Test::ReadLat.rtt_factor(), 1.0);
    }

    #[test]
    fn outs_sets_the_outstanding_reads_as_perftest_does() {
        let o = parse("read_bw -o 4").unwrap();
        assert_eq!((o.ird_ord(), o.out_reads()), ((4, 4), 4));
        let o = parse("atomic_lat --outs 2").unwrap();
        assert_eq!(o.ird_ord(), (2, 2));
        // Without -o (or -o 0: the device's most), the defaults.
        for args in ["read_bw", "read_lat -o 0"] {
            let o = parse(args).unwrap();
            assert_eq!((o.ird_ord(), o.out_reads()), ((16, 16), 128), "{args}");
        }
        assert_eq!(parse("read_bw -o 1000").unwrap().ird_ord(), (128, 128));
        let e = parse("write_bw -o 4").unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string()
                .contains("-o (outstanding reads) is for the read"),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("send_lat -q 2").is_err());
        assert!(parse("read_bw --bytes").is_err() && parse("send_bw --bytes").unwrap().bytes);
        assert!(parse("write_lat -n 1").is_err());
        assert!(parse("write_bw -D 0").is_err());
        assert!(parse("write_bw -a -D 2").is_err());
        assert!(parse("write_bw -t 0").is_err());
        assert!(parse("write_bw -q 0").is_err());
        assert!(parse("write_bw -I x").is_err());
        assert!(parse("ping_lat").is_err());
        assert!(parse("write_bw -s 0").is_err());
        assert!(parse("write_bw -n").is_err());
        assert!(parse("write_bw -n 0").is_err());
        assert!(parse("write_bw -x").is_err());
        assert!(parse("atomic_bw -s 16").is_err());
        assert!(parse("atomic_lat -a").is_err());
        assert!(parse("write_lat -b").is_err());
        assert!(parse("send_lat --run_infinitely").is_err());
        assert!(parse("write_bw --run_infinitely -a").is_err());
        assert!(parse("send_bw -b --run_infinitely").is_err());
        assert!(parse("write_bw --output latency").is_err());
        assert!(parse("write_lat --output bandwidth").is_err());
        assert!(parse("write_bw --output bandwidth --json").is_err());
        let help = parse("--help").unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        assert_eq!(help.exit_code(), 0);
        assert_eq!(parse("write_bw -x").unwrap_err().exit_code(), 2);
    }
}
