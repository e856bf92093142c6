//! `iwperf` command line: perftest's flags.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use verbs::{DeviceConfig, RtrFlags};

use crate::args::{ArgError, parse_size};

/// Usage text.
pub const HELP: &str = "\
usage: iwperf write_bw|read_bw|send_bw [options] [server-address]
  Runs perftest's ib_write_bw / ib_read_bw / ib_send_bw over this iWARP stack, speaking perftest's
  rdma_cm (-R) exchange, so either side may be Linux siw running perftest.
  No address: server (listens on 0.0.0.0). With an address: client.
  -s SIZE           message size (default 65536)
  -n ITERS          iterations (default 5000 for write_bw, 1000 otherwise)
  -p PORT           port (default 18515)
  -R                accepted (rdma_cm is the only mode)
  -F                accepted and ignored
  -d DEV            accepted and ignored
  --report_gbits    report Gb/s instead of MB/s
  --crc             ask for MPA CRC
  --first-delay MS  client: wait MS after each MPA Reply before the first FPDU
                    (siw hazard A; default 200, 0 = off)
  --timeout SECS    per-step timeout (default 30)
  -h, --help        this text";

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
}

impl Test {
    /// The subcommand name.
    pub fn name(self) -> &'static str {
        match self {
            Self::WriteBw => "write_bw",
            Self::ReadBw => "read_bw",
            Self::SendBw => "send_bw",
        }
    }

    /// The `out_reads` value siw's perftest advertises for this test.
    pub fn out_reads(self) -> u32 {
        match self {
            Self::WriteBw | Self::SendBw => 1,
            Self::ReadBw => 128,
        }
    }

    /// The IRD/ORD to offer in MPA: what siw's perftest offers (0/0 for write_bw,
    /// 128/128 for read_bw; we offer 16/16 for read_bw).
    pub fn ird_ord(self) -> (u16, u16) {
        match self {
            Self::WriteBw | Self::SendBw => (0, 0),
            Self::ReadBw => (16, 16),
        }
    }

    /// How many address ([`super::msg::Dest`]) exchanges precede the test: 3, or 4
    /// for `send_bw`.
    pub fn dest_exchanges(self) -> usize {
        if self == Self::SendBw { 4 } else { 3 }
    }
}

/// Parsed options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opts {
    /// The test.
    pub test: Test,
    /// Message size.
    pub size: usize,
    /// Iterations.
    pub iters: u64,
    /// Port.
    pub port: u16,
    /// Server address (client role), or `None` (server role).
    pub server: Option<IpAddr>,
    /// `--report_gbits`.
    pub gbits: bool,
    /// `--crc`.
    pub crc: bool,
    /// `--first-delay`.
    pub first_delay: Duration,
    /// Per-step timeout.
    pub timeout: Duration,
}

impl Opts {
    /// Parses `args` (without the program name). `Ok(None)` means help was asked for.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, ArgError> {
        let mut it = args.into_iter();
        let test = match it.next().as_deref() {
            Some("write_bw") => Test::WriteBw,
            Some("read_bw") => Test::ReadBw,
            Some("send_bw") => Test::SendBw,
            Some("-h" | "--help") | None => return Ok(None),
            Some(other) => return Err(ArgError(format!("unknown test {other:?}"))),
        };
        let mut o = Self {
            test,
            size: 65536,
            iters: if test == Test::WriteBw { 5000 } else { 1000 },
            port: 18515,
            server: None,
            gbits: false,
            crc: false,
            first_delay: Duration::from_millis(200),
            timeout: Duration::from_secs(30),
        };
        while let Some(a) = it.next() {
            let mut val = |flag: &str| {
                it.next()
                    .ok_or_else(|| ArgError(format!("{flag} needs a value")))
            };
            match a.as_str() {
                "-h" | "--help" => return Ok(None),
                "-R" | "-F" => {}
                "--report_gbits" => o.gbits = true,
                "--crc" => o.crc = true,
                "-d" => {
                    val("-d")?;
                }
                "-s" => {
                    let v = val("-s")?;
                    o.size = parse_size(&v)
                        .filter(|&s| (1..=(1 << 30)).contains(&s))
                        .ok_or_else(|| ArgError(format!("-s: bad size {v:?}")))?;
                }
                "-n" => o.iters = number(&val("-n")?, "-n")?,
                "-p" => o.port = number(&val("-p")?, "-p")?,
                "--first-delay" => {
                    o.first_delay = Duration::from_millis(number(&val(&a)?, "--first-delay")?);
                }
                "--timeout" => o.timeout = Duration::from_secs(number(&val(&a)?, "--timeout")?),
                s if !s.starts_with('-') && o.server.is_none() => {
                    o.server = Some(
                        s.parse()
                            .map_err(|_| ArgError(format!("bad address {s:?}")))?,
                    );
                }
                other => return Err(ArgError(format!("unknown option {other:?}"))),
            }
        }
        if o.iters == 0 {
            return Err(ArgError("-n must be at least 1".into()));
        }
        Ok(Some(o))
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
        DeviceConfig::default()
            .mpa_revision(2)
            .ird_ord(ird, ord)
            .crc(self.crc)
            .markers(false)
            .queue_depths(QUEUE_DEPTH, QUEUE_DEPTH)
            .p2p(false, RtrFlags::NONE)
            .connect_timeout(self.timeout)
            .mpa_timeout(self.timeout)
    }
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
    fn rejects_bad_input() {
        assert!(parse("send_lat").is_err());
        assert!(parse("write_bw -s 0").is_err());
        assert!(parse("write_bw -n").is_err());
        assert!(parse("write_bw -n 0").is_err());
        assert!(parse("write_bw -x").is_err());
        assert!(parse("--help").unwrap().is_none());
    }
}
