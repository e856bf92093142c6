//! The rping-style command line of `iwarp-rping`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use verbs::{DeviceConfig, RtrFlags};

use super::{MAX_SIZE, MIN_SIZE};
use crate::args::ArgError;

/// Which side of the ping loop to play.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// `-s`: listen, RDMA Read the client's buffer and Write it back.
    Server,
    /// `-c`: connect and advertise buffers.
    Client,
}

/// Everything `iwarp-rping` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opts {
    /// `-s` or `-c`.
    pub role: Role,
    /// `-a ADDR`: the server's address (client) or the address to bind (server).
    pub addr: IpAddr,
    /// `-p PORT` (default 7174).
    pub port: u16,
    /// `-C COUNT`: pings to run; 0 (the default) runs until interrupted (client) or until
    /// the client leaves (server).
    pub count: u64,
    /// `-S SIZE`: the client's buffer size (default 64, rping's default).
    pub size: usize,
    /// `-v`: print the ping data.
    pub verbose: bool,
    /// `-V`: the client verifies the data written back.
    pub validate: bool,
    /// `-d`: debug logs of the stack on stderr.
    pub debug: bool,
    /// `-P`: the server keeps accepting connections (rping's persistent server).
    pub persistent: bool,
    /// `--crc`: ask for MPA CRC32c (default off, like siw's default).
    pub crc: bool,
    /// `--p2p`: MPA peer-to-peer mode (RTR: RDMA Write as the responder prefers).
    pub p2p: bool,
    /// `--first-delay MS`: the client waits this long after the MPA Reply before its first
    /// FPDU (siw hazard A; default 200 ms, 0 turns it off).
    pub first_delay: Duration,
    /// `--timeout SECS`: how long any one step may take (default 10 s).
    pub timeout: Duration,
    /// `--daemon PATH`: go through the local iwarpd at this control socket.
    pub daemon: Option<std::path::PathBuf>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            role: Role::Client,
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: 7174,
            count: 0,
            size: 64,
            verbose: false,
            validate: false,
            debug: false,
            persistent: false,
            crc: false,
            p2p: false,
            first_delay: Duration::from_millis(200),
            timeout: Duration::from_secs(10),
            daemon: None,
        }
    }
}

/// The `--help` text.
pub const HELP: &str = "\
iwarp-rping: rdma-core's rping on this iWARP stack (interoperates with Linux siw rping)

USAGE: iwarp-rping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-v] [-V] [-d] [-P]
                   [--crc] [--p2p] [--first-delay MS] [--timeout SECS] [--daemon PATH]

  -s               server: listen on ADDR:PORT (default 0.0.0.0)
  -c               client: connect to ADDR:PORT
  -a ADDR          address (client: required)
  -p PORT          port (default 7174)
  -C COUNT         pings (default 0: forever / until the client leaves)
  -S SIZE          client buffer size, 23..=65535 (default 64)
  -v               print the ping data
  -V               client: verify the data written back
  -d               debug logs (RUST_LOG overrides the filter)
  -P               server: persistent, accept connection after connection
  --crc            ask for MPA CRC32c (default off, as siw)
  --p2p            MPA peer-to-peer mode (RTR message after the handshake)
  --first-delay MS client: wait MS after the MPA Reply before the first FPDU
                   (default 200; works around siw missing an FPDU that arrives
                   right after its MPA Reply; 0 turns it off)
  --timeout SECS   how long one step may take (default 10)
  --daemon PATH    go through the local iwarpd listening on this control socket
                   (IWARP_DEVICE=unix:PATH does the same; the daemon's MPA
                   settings then apply)

MPA revision 2 with the IRD/ORD block, IRD/ORD 1/1 as rping.";

impl Opts {
    /// Parses the arguments after the program name. `Ok(None)` for `-h`/`--help`.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Self>, ArgError> {
        let mut o = Self::default();
        let mut role = None;
        let mut addr = None;
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let mut value = |name: &str| {
                it.next()
                    .ok_or_else(|| ArgError(format!("{name} needs a value")))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(None),
                "-s" => role = Some(Role::Server),
                "-c" => role = Some(Role::Client),
                "-v" => o.verbose = true,
                "-V" => o.validate = true,
                "-d" => o.debug = true,
                "-P" => o.persistent = true,
                "--crc" => o.crc = true,
                "--p2p" => o.p2p = true,
                "--daemon" => o.daemon = Some(value("--daemon")?.into()),
                "-a" => {
                    let v = value("-a")?;
                    addr = Some(crate::args::host("-a", &v)?);
                }
                "-p" => o.port = number(&value("-p")?, "-p")?,
                "-C" => o.count = number(&value("-C")?, "-C")?,
                "-S" => o.size = number(&value("-S")?, "-S")?,
                "--first-delay" => {
                    o.first_delay =
                        Duration::from_millis(number(&value("--first-delay")?, "--first-delay")?);
                }
                "--timeout" => {
                    o.timeout = Duration::from_secs(number(&value("--timeout")?, "--timeout")?);
                }
                other => return Err(ArgError(format!("unknown argument {other:?}; see --help"))),
            }
        }
        o.role = role.ok_or_else(|| ArgError("give -s (server) or -c (client)".to_owned()))?;
        match (o.role, addr) {
            (_, Some(a)) => o.addr = a,
            (Role::Server, None) => o.addr = IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            (Role::Client, None) => return Err(ArgError("the client needs -a ADDR".to_owned())),
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&o.size) {
            return Err(ArgError(format!(
                "-S {}: the size must be {MIN_SIZE}..={MAX_SIZE}",
                o.size
            )));
        }
        Ok(Some(o))
    }

    /// The socket address to connect to or listen on.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }

    /// The device settings: MPA revision 2 with the IRD/ORD block, IRD/ORD 1/1 (rping's
    /// `responder_resources` and `initiator_depth`), CRC and peer-to-peer as asked.
    pub fn device_config(&self) -> DeviceConfig {
        let cfg = DeviceConfig::default()
            .mpa_revision(2)
            .ird_ord(1, 1)
            .crc(self.crc)
            .markers(false)
            .p2p(
                self.p2p,
                if self.p2p {
                    RtrFlags::WRITE | RtrFlags::READ
                } else {
                    RtrFlags::NONE
                },
            )
            .connect_timeout(self.timeout)
            .mpa_timeout(self.timeout);
        match &self.daemon {
            Some(path) => cfg.daemon(path),
            None => cfg,
        }
    }
}

fn number<T: std::str::FromStr>(text: &str, flag: &str) -> Result<T, ArgError> {
    text.parse()
        .map_err(|_| ArgError(format!("{flag}: bad number {text:?}")))
}
