//! `iwperf` command line: perftest's flags.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use verbs::{DeviceConfig, Extensions, RtrFlags};

use crate::args::{ArgError, parse_size};

/// Usage text.
pub const HELP: &str = "\
usage: iwperf TEST [options] [server-address]
  TEST: write_bw | read_bw | send_bw | write_lat | read_lat | send_lat
  Runs perftest's ib_<TEST> over this iWARP stack, speaking perftest's rdma_cm (-R)
  exchange, so either side may be Linux siw running perftest with the same flags.
  No address: server (listens on 0.0.0.0, exits when its test is done). With an
  address: client.
  -s SIZE           message size (default 65536 for *_bw, 2 for *_lat)
  -a                all sizes 2, 4, ... 2^23, one result line each
  -n ITERS          iterations (default 5000 for write_bw, 1000 otherwise)
  -D SECS           run for SECS seconds instead of -n iterations
  -t DEPTH          tx depth: operations in flight per QP in *_bw (default 128)
  -I SIZE           inline size: accepted and recorded only (this stack has no
                    separate inline limit; every message is sent the same way)
  -e                *_lat: sleep until each completion arrives (completion events)
                    instead of polling the CQ and the buffer busily, perftest's default
  -q N              *_bw only: N test connections, each running the test, results
                    summed; between two iwperf only (perftest over rdma_cm on siw
                    is not tested with -q)
  -p PORT           port (default 18515)
  -R                accepted (rdma_cm is the only mode)
  -F                accepted and ignored
  -d DEV            accepted and ignored
  --report_gbits    report Gb/s instead of MB/s
  --json            print one JSON object per result line instead of the table
  --crc             ask for MPA CRC
  --large-fpdus     offer FPDUs larger than one TCP segment (siw's experimental MPA
                    bit; used only if the peer offers it too: another iwperf with
                    this flag, or siw built with try_gso)
  --first-delay MS  client: wait MS after each MPA Reply before the first FPDU
                    (siw hazard A; default 200, 0 = off)
  --timeout SECS    per-step timeout (default 30)
  --daemon PATH     go through the local iwarpd listening on this control socket
                    (IWARP_DEVICE=unix:PATH does the same; the daemon's MPA
                    settings, CRC included, then apply)
  --no-push         send every request through the send queue, never seed 000's push
                    path (through iwarpd or embedded: to measure what pushing gains)
  --imm             send_lat: every Send carries a 32-bit immediate value (this
                    stack's Send with Immediate Data; both sides need it agreed)
  --extensions LIST this stack's extensions to offer or accept: send_imm, read_v2,
                    all (default) or none (Reads are RFC 5040 Reads without read_v2)
  -h, --help        this text
  A progress line goes to stderr (when it is a terminal) for runs over 2 seconds.";

/// The largest size `-a` runs (perftest's 2^23).
pub const MAX_ALL_SIZE: usize = 1 << 23;

/// perftest's default TX depth for the bandwidth tests.
pub const DEFAULT_TX_DEPTH: usize = 128;

/// Send and receive queue depth: room for perftest's TX depth (128) and RX depth
/// (up to 512 receives pre-posted for `send_bw`).
pub const QUEUE_DEPTH: usize = 1024;

/// Which perftest test.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_write_bw`: the client RDMA Writes into the server's buffer.
    WriteBw,
    /// `ib_read_bw`: the client RDMA Reads the server's buffer.
    ReadBw,
    /// `ib_send_bw`: the client Sends, the server receives and RDMA Writes credits.
    SendBw,
    /// `ib_write_lat`: RDMA Write ping-pong; each side polls the last octet of its buffer.
    WriteLat,
    /// `ib_read_lat`: the client RDMA Reads the server's buffer, one Read at a time.
    ReadLat,
    /// `ib_send_lat`: Send ping-pong into pre-posted receives.
    SendLat,
}

impl Test {
    /// Every test, in help order.
    pub const ALL: [Self; 6] = [
        Self::WriteBw,
        Self::ReadBw,
        Self::SendBw,
        Self::WriteLat,
        Self::ReadLat,
        Self::SendLat,
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
        }
    }

    /// A latency test.
    pub fn is_lat(self) -> bool {
        matches!(self, Self::WriteLat | Self::ReadLat | Self::SendLat)
    }

    /// The `out_reads` value siw's perftest advertises for this test.
    pub fn out_reads(self) -> u32 {
        match self {
            Self::ReadBw | Self::ReadLat => 128,
            _ => 1,
        }
    }

    /// The IRD/ORD to offer in MPA: what siw's perftest offers (0/0, or 128/128 for
    /// the read tests; we offer 16/16 for those).
    pub fn ird_ord(self) -> (u16, u16) {
        match self {
            Self::ReadBw | Self::ReadLat => (16, 16),
            _ => (0, 0),
        }
    }

    /// What a latency sample is divided by: perftest reports half the round trip of
    /// the ping-pong tests and the whole time of a Read.
    pub fn rtt_factor(self) -> f64 {
        if self == Self::ReadLat { 1.0 } else { 2.0 }
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
    /// `--daemon PATH`: go through the local iwarpd at this control socket.
    pub daemon: Option<std::path::PathBuf>,
    /// `--no-push`: never use the push path (through iwarpd or embedded).
    pub no_push: bool,
    /// `--imm`: Sends with Immediate Data.
    pub imm: bool,
    /// `--extensions`: this stack's extensions offered and accepted.
    pub extensions: Extensions,
}

impl Opts {
    /// The defaults for `test`.
    pub fn new(test: Test) -> Self {
        Self {
            test,
            size: if test.is_lat() { 2 } else { 65536 },
            all_sizes: false,
            max_size: MAX_ALL_SIZE,
            iters: if test == Test::WriteBw { 5000 } else { 1000 },
            duration: None,
            tx_depth: DEFAULT_TX_DEPTH,
            inline_size: 0,
            qps: 1,
            events: false,
            port: 18515,
            server: None,
            gbits: false,
            json: false,
            crc: false,
            large_fpdus: false,
            first_delay: Duration::from_millis(200),
            timeout: Duration::from_secs(30),
            daemon: None,
            no_push: false,
            imm: false,
            extensions: Extensions::ALL,
        }
    }

    /// Parses `args` (without the program name). `Ok(None)` means help was asked for.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, ArgError> {
        let mut it = args.into_iter();
        let test = match it.next().as_deref() {
            Some("-h" | "--help") => return Ok(None),
            None => {
                return Err(ArgError(
                    "no test given: iwperf TEST [OPTIONS] [SERVER], TEST one of write_bw, \
                     read_bw, send_bw, write_lat, read_lat, send_lat"
                        .into(),
                ));
            }
            Some(name) => Test::ALL
                .into_iter()
                .find(|t| t.name() == name)
                .ok_or_else(|| {
                    ArgError(format!(
                        "unknown test {name:?}; one of write_bw, read_bw, send_bw, \
                         write_lat, read_lat, send_lat"
                    ))
                })?,
        };
        let mut o = Self::new(test);
        while let Some(a) = it.next() {
            let mut val = |flag: &str| {
                it.next()
                    .ok_or_else(|| ArgError(format!("{flag} needs a value")))
            };
            match a.as_str() {
                "-h" | "--help" => return Ok(None),
                "-R" | "-F" => {}
                "-a" => o.all_sizes = true,
                "-e" => o.events = true,
                "--report_gbits" => o.gbits = true,
                "--json" => o.json = true,
                "--crc" => o.crc = true,
                "--large-fpdus" => o.large_fpdus = true,
                "--daemon" => o.daemon = Some(val("--daemon")?.into()),
                "--no-push" => o.no_push = true,
                "--imm" => o.imm = true,
                "--extensions" => {
                    o.extensions = Extensions::parse_list(&val(&a)?).map_err(ArgError)?;
                }
                "-d" => {
                    val("-d")?;
                }
                "-s" => o.size = size(&val("-s")?, "-s")?,
                "--max-size" => o.max_size = size(&val(&a)?, "--max-size")?,
                "-I" => {
                    let v = val("-I")?;
                    o.inline_size =
                        parse_size(&v).ok_or_else(|| ArgError(format!("-I: bad size {v:?}")))?;
                }
                "-n" => o.iters = number(&val("-n")?, "-n")?,
                "-D" => {
                    let secs: u64 = number(&val("-D")?, "-D")?;
                    if secs == 0 {
                        return Err(ArgError("-D must be at least 1 second".into()));
                    }
                    o.duration = Some(Duration::from_secs(secs));
                }
                "-t" => o.tx_depth = number(&val("-t")?, "-t")?,
                "-q" => o.qps = number(&val("-q")?, "-q")?,
                "-p" => o.port = number(&val("-p")?, "-p")?,
                "--first-delay" => {
                    o.first_delay = Duration::from_millis(number(&val(&a)?, "--first-delay")?);
                }
                "--timeout" => o.timeout = Duration::from_secs(number(&val(&a)?, "--timeout")?),
                s if !s.starts_with('-') && o.server.is_none() => {
                    o.server = Some(crate::args::host("the server address", s)?);
                }
                other => return Err(ArgError(format!("unknown option {other:?}"))),
            }
        }
        o.check()?;
        Ok(Some(o))
    }

    fn check(&self) -> Result<(), ArgError> {
        if self.iters == 0 {
            return Err(ArgError("-n must be at least 1".into()));
        }
        if self.test.is_lat() && self.iters < 2 && self.duration.is_none() {
            return Err(ArgError(
                "-n must be at least 2 for a latency test (samples are intervals)".into(),
            ));
        }
        if !(1..=QUEUE_DEPTH / 2).contains(&self.tx_depth) {
            return Err(ArgError(format!(
                "-t must be between 1 and {}",
                QUEUE_DEPTH / 2
            )));
        }
        if !(1..=MAX_QPS).contains(&self.qps) {
            return Err(ArgError(format!("-q must be between 1 and {MAX_QPS}")));
        }
        if self.qps > 1 && self.test.is_lat() {
            return Err(ArgError(
                "-q is for the bandwidth tests; perftest's latency tests use one QP".into(),
            ));
        }
        if self.all_sizes && self.duration.is_some() {
            return Err(ArgError(
                "-a and -D do not go together: -D runs one size (-s)".into(),
            ));
        }
        if self.all_sizes && self.max_size < 2 {
            return Err(ArgError("--max-size must be at least 2 with -a".into()));
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
            iters: if self.duration.is_some() {
                0
            } else {
                self.iters
            },
            duration_ms: self.duration.map_or(0, |d| d.as_millis() as u64),
            qps: self.qps as u32,
            imm: self.imm,
        }
    }

    /// The largest message size of the run (what the buffers are sized for).
    pub fn buf_size(&self) -> usize {
        self.sizes().into_iter().max().unwrap_or(self.size)
    }

    /// The server's address (client role) or the listening address (server role).
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(
            self.server.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            self.port,
        )
    }

    /// The device configuration: MPA revision 2, the test's IRD/ORD, CRC as asked.
    pub fn device_config(&self) -> DeviceConfig {
        let (ird, ord) = self.test.ird_ord();
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

/// The most test connections `-q` takes.
pub const MAX_QPS: usize = 64;

fn size(text: &str, flag: &str) -> Result<usize, ArgError> {
    parse_size(text)
        .filter(|&s| (1..=(1 << 30)).contains(&s))
        .ok_or_else(|| ArgError(format!("{flag}: bad size {text:?}")))
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, ArgError> {
    text.parse()
        .map_err(|_| ArgError(format!("{flag}: bad number {text:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<Opts>, ArgError> {
        Opts::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn perftest_flags() {
        let o = parse("write_bw -d siw0 -F -R -s 4096 -n 16 --report_gbits 10.231.0.11")
            .unwrap()
            .unwrap();
        assert_eq!(o.test, Test::WriteBw);
        assert_eq!((o.size, o.iters, o.port), (4096, 16, 18515));
        assert!(o.gbits);
        assert_eq!(o.socket_addr(), "10.231.0.11:18515".parse().unwrap());
        let s = parse("read_bw -p 9000").unwrap().unwrap();
        assert_eq!(
            (s.test, s.server, s.iters, s.port),
            (Test::ReadBw, None, 1000, 9000)
        );
    }

    #[test]
    fn latency_defaults_and_new_flags() {
        let o = parse("write_lat").unwrap().unwrap();
        assert_eq!((o.size, o.iters, o.qps, o.events), (2, 1000, 1, false));
        assert!(parse("send_lat -e").unwrap().unwrap().events);
        assert_eq!(o.sizes(), vec![2]);
        let o = parse("send_bw -a -t 64 -I 220 -q 2 --json --max-size 64 1.2.3.4")
            .unwrap()
            .unwrap();
        assert_eq!(o.sizes(), vec![2, 4, 8, 16, 32, 64]);
        assert_eq!(o.buf_size(), 64);
        let d = parse("write_bw -D 3").unwrap().unwrap();
        assert_eq!(d.duration, Some(Duration::from_secs(3)));
        assert_eq!((o.tx_depth, o.inline_size, o.qps), (64, 220, 2));
        assert!(o.json);
        let all = parse("read_lat -a").unwrap().unwrap().sizes();
        assert_eq!((all.len(), all.last()), (23, Some(&(1 << 23))));
        assert_eq!(Test::ReadLat.rtt_factor(), 1.0);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse("send_lat -q 2").is_err());
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
        assert!(parse("--help").unwrap().is_none());
    }
}
