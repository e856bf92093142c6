//! The rping-style command line of `iwarp-rping`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use verbs::{DeviceConfig, Extensions, RtrFlags};

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

use super::{MAX_SIZE, MIN_SIZE};

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
    /// `--extensions LIST`: this stack's extensions offered and accepted; none by
    /// default, so that the traffic is rping's, which Wireshark decodes.
    pub extensions: Extensions,
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
            extensions: Extensions::NONE,
        }
    }
}

/// What `--help` says after the flags.
const AFTER_HELP: &str = "MPA revision 2 with the IRD/ORD block, IRD/ORD 1/1 as rping. \
Interoperates with rping on Linux siw in both roles. The traffic is standard iWARP, which \
Wireshark decodes: this stack's extensions (Read V2, Send with Immediate Data) are off \
unless --extensions turns them on, and used only when both sides are this stack.";

/// The command line as `clap` reads it (rping's flags; `-V` is rping's validate, so the
/// version is `--version` only).
#[derive(Parser, Debug)]
#[command(
    name = "iwarp-rping",
    version,
    about = "rdma-core's rping on this iWARP stack",
    disable_version_flag = true,
    after_help = AFTER_HELP,
    max_term_width = 100
)]
struct Cli {
    /// Server: listen on ADDR:PORT (default [::], IPv6 and IPv4 clients alike).
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Client: connect to ADDR:PORT.
    #[arg(short = 'c')]
    client: bool,
    /// Address or host name (the client's is required).
    #[arg(short = 'a', value_name = "ADDR")]
    addr: Option<String>,
    /// Port.
    #[arg(short = 'p', value_name = "PORT", default_value_t = 7174)]
    port: u16,
    /// Pings (0: forever, or until the client leaves; Ctrl-C ends a client's run with
    /// its statistics).
    #[arg(short = 'C', value_name = "COUNT", default_value_t = 0)]
    count: u64,
    /// Client buffer size.
    #[arg(short = 'S', value_name = "SIZE", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(MIN_SIZE as u64..=MAX_SIZE as u64))]
    size: u64,
    /// Print the ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Client: verify the data written back.
    #[arg(short = 'V')]
    validate: bool,
    /// Debug logs (RUST_LOG overrides the filter).
    #[arg(short = 'd')]
    debug: bool,
    /// Server: persistent, accept connection after connection.
    #[arg(short = 'P')]
    persistent: bool,
    /// Ask for MPA CRC32c (default off, as siw).
    #[arg(long = "crc")]
    crc: bool,
    /// MPA peer-to-peer mode (RTR message after the handshake).
    #[arg(long = "p2p")]
    p2p: bool,
    /// Client: wait MS after the MPA Reply before the first FPDU (works around siw
    /// missing an FPDU that arrives right after its MPA Reply; 0 turns it off).
    #[arg(long = "first-delay", value_name = "MS", default_value_t = 200)]
    first_delay: u64,
    /// How long one step may take, in seconds.
    #[arg(long = "timeout", value_name = "SECS", default_value_t = 10)]
    timeout: u64,
    /// Go through the local iwarpd listening on this control socket
    /// (IWARP_DEVICE=unix:PATH does the same; the daemon's MPA settings then apply).
    #[arg(long = "daemon", value_name = "PATH")]
    daemon: Option<std::path::PathBuf>,
    /// This stack's extensions to offer or accept: send_imm, read_v2, all or none
    /// (through iwarpd, the daemon's setting applies).
    #[arg(long = "extensions", value_name = "LIST", default_value = "none", value_parser = crate::args::extensions)]
    extensions: Extensions,
    /// Print the version.
    #[arg(long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
}

impl Opts {
    /// Parses the arguments after the program name. Help and `--version` come back as
    /// the `clap` errors that print them (exit status 0), anything wrong as a usage error
    /// naming the flag (exit status 2): `error.exit()` does both.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("iwarp-rping".to_owned()).chain(args))?;
        let usage = |kind, msg: &str| Cli::command().error(kind, msg);
        let role = match (cli.server, cli.client) {
            (true, _) => Role::Server,
            (_, true) => Role::Client,
            _ => {
                return Err(usage(
                    ErrorKind::MissingRequiredArgument,
                    "give -s (server) or -c (client)",
                ));
            }
        };
        let addr = match (role, cli.addr) {
            (_, Some(a)) => {
                crate::args::host("-a", &a).map_err(|e| usage(ErrorKind::ValueValidation, &e))?
            }
            (Role::Server, None) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            (Role::Client, None) => {
                return Err(usage(
                    ErrorKind::MissingRequiredArgument,
                    "the client needs -a ADDR",
                ));
            }
        };
        Ok(Self {
            role,
            addr,
            port: cli.port,
            count: cli.count,
            size: cli.size as usize,
            verbose: cli.verbose,
            validate: cli.validate,
            debug: cli.debug,
            persistent: cli.persistent,
            crc: cli.crc,
            p2p: cli.p2p,
            first_delay: Duration::from_millis(cli.first_delay),
            timeout: Duration::from_secs(cli.timeout),
            daemon: cli.daemon,
            extensions: cli.extensions,
        })
    }

    /// The socket address to connect to or listen on.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.port)
    }

    /// The addresses the server tries to listen on, in turn: `-a`, or without it (or
    /// with `-a ::`) `[::]` for IPv6 and IPv4 clients alike, then `0.0.0.0` on a host
    /// without IPv6.
    pub fn listen_addrs(&self) -> Vec<SocketAddr> {
        if self.addr == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
            crate::listen::any_address(self.port).to_vec()
        } else {
            vec![self.socket_addr()]
        }
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
            .mpa_timeout(self.timeout)
            .extensions(self.extensions);
        match &self.daemon {
            Some(path) => cfg.daemon(path),
            None => cfg,
        }
    }
}
