//! [`DeviceConfig`]: the settings a [`Device`](crate::Device) is opened with.

use std::path::Path;
use std::time::Duration;

use mpa::{MpaConfig, RtrFlags};
#[cfg(feature = "embedded")]
use offload_engine::{CaptureTap, EngineConfig};
use rdmap::StreamConfig;

/// Settings of a [`Device`](crate::Device): the engine's configuration, with setters for
/// the knobs applications change most.
///
/// The defaults interoperate with Linux siw and hardware RNICs: MPA revision 2 with CRC and
/// IRD/ORD 16, no markers, no peer-to-peer mode, FPDUs as large as the path MSS allows,
/// 256-deep queues, TCP_NODELAY and a 10-second connect timeout.
///
/// ```
/// use std::time::Duration;
/// let cfg = verbs::DeviceConfig::default()
///     .crc(false)
///     .ird_ord(32, 32)
///     .queue_depths(1024, 1024)
///     .connect_timeout(Duration::from_secs(3));
/// assert!(!cfg.mpa().crc);
/// assert_eq!(cfg.mpa().ird, 32);
/// ```
///
/// Values are checked when they are used: an MPA revision other than 1 or 2 or an IRD/ORD
/// above 0x3FFF fails [`Device::connect`](crate::Device::connect) with
/// [`ConnectError::Invalid`](crate::ConnectError::Invalid).
///
/// Through iwarpd, the daemon's settings apply to the connection, and only the queue
/// depths and [`push`](Self::push) are this application's. The settings of the engine
/// alone (timeouts, socket options, capture, push resources) exist with the `embedded`
/// feature.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    mpa: MpaConfig,
    stream: StreamConfig,
    /// The rest of what the embedded engine is built from.
    #[cfg(feature = "embedded")]
    engine: EngineConfig,
    daemon: Option<Daemon>,
    no_push: bool,
    push_socket: Option<bool>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        #[cfg(feature = "embedded")]
        let (mpa, stream, engine) = {
            let e = EngineConfig::default();
            (e.mpa.clone(), e.stream.clone(), e)
        };
        #[cfg(not(feature = "embedded"))]
        let (mpa, stream) = (MpaConfig::default(), {
            let mut s = StreamConfig::default();
            s.mulpdu = mpa::MAX_ULPDU;
            s
        });
        Self {
            mpa,
            stream,
            #[cfg(feature = "embedded")]
            engine,
            daemon: None,
            no_push: false,
            push_socket: None,
        }
    }
}

#[derive(Clone, Debug)]
enum Daemon {
    At(std::path::PathBuf),
    Never,
}

impl DeviceConfig {
    /// The defaults (see the type's docs).
    pub fn new() -> Self {
        Self::default()
    }

    /// What MPA asks for on every connection (revision, CRC, markers, IRD/ORD,
    /// peer-to-peer RTR, handshake timeout), read-only: the setters below change it.
    pub fn mpa(&self) -> &MpaConfig {
        &self.mpa
    }

    /// Run through the local `iwarpd` listening on the control socket `path` (daemon
    /// mode) instead of an engine in this process. Without this, the `IWARP_DEVICE`
    /// environment variable decides: `unix:PATH` (or `unix` for iwarpd's default socket)
    /// selects daemon mode, anything else or nothing the embedded engine.
    pub fn daemon(mut self, path: impl AsRef<Path>) -> Self {
        self.daemon = Some(Daemon::At(path.as_ref().to_owned()));
        self
    }

    /// Push lone small requests (seed 000's push path, the default: through iwarpd into
    /// the domain's shared push region; embedded, into an in-process one), or send every
    /// request through the send queue only (`false`: to measure what pushing gains, or
    /// to rule it out).
    pub fn push(mut self, on: bool) -> Self {
        self.no_push = !on;
        #[cfg(feature = "embedded")]
        if !on {
            self.engine.push = None;
        } else if self.engine.push.is_none() {
            self.engine.push = Some(Default::default());
        }
        self
    }

    /// Embedded: the push path's resources, shared by the device's queue pairs: how many
    /// pushed messages may be in flight at once (seed 000's tracking entries), and the
    /// most octets of transmit credit set aside for pushed traffic (refilled at 4 GiB/s).
    /// A push that finds none left is discarded and its request runs from the send
    /// queue. Defaults: 256 and 1 MiB. Through iwarpd the daemon's settings apply.
    #[cfg(feature = "embedded")]
    pub fn push_resources(mut self, tracking: usize, credit_octets: u64) -> Self {
        let p = self.engine.push.get_or_insert_with(Default::default);
        p.tracking = tracking;
        p.credit_cap = credit_octets;
        self
    }

    pub(crate) fn push_enabled(&self) -> bool {
        !self.no_push
    }

    /// Through iwarpd: ask it to share each queue pair's socket, and write a lone small
    /// Send or Write onto an empty send queue to the socket from the posting thread (the
    /// push path that skips the daemon, issue 33), instead of pushing it through the
    /// daemon. On by default (with the push path); `false` here or `IWARP_PUSH_SOCKET=0`
    /// turns it off. The daemon keeps reading the socket, and keeps spinning while the
    /// application pushes, so the answer is taken without a thread wake-up.
    pub fn push_socket(mut self, on: bool) -> Self {
        self.push_socket = Some(on);
        self
    }

    pub(crate) fn push_socket_wanted(&self) -> bool {
        self.push_socket.unwrap_or_else(|| {
            std::env::var("IWARP_PUSH_SOCKET")
                .map_or(true, |v| !matches!(v.as_str(), "0" | "off" | "no"))
        })
    }

    /// Run the engine in this process whatever `IWARP_DEVICE` says.
    pub fn embedded(mut self) -> Self {
        self.daemon = Some(Daemon::Never);
        self
    }

    /// The control socket to go through, if any; an error if `IWARP_DEVICE` names
    /// nothing this library knows.
    pub(crate) fn daemon_path(&self) -> Result<Option<std::path::PathBuf>, crate::DaemonError> {
        match &self.daemon {
            Some(Daemon::At(p)) => Ok(Some(p.clone())),
            Some(Daemon::Never) => Ok(None),
            None => crate::daemon::from_env(),
        }
    }

    /// Through iwarpd: the ready-to-receive types a connection offers as the initiator
    /// (peer-to-peer mode, [`p2p`](Self::p2p)), 0 for the daemon's own setting.
    pub(crate) fn rtr_wanted(&self) -> u8 {
        if self.mpa.p2p { self.mpa.rtr.bits() } else { 0 }
    }

    /// The queue depths a queue pair asks iwarpd for (beyond `u32::MAX`: more than it
    /// allows, and it says so).
    pub(crate) fn queue_depths_wanted(&self) -> ipc::control::QueueDepths {
        let at_most = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        ipc::control::QueueDepths {
            sq: at_most(self.stream.sq_depth),
            rq: at_most(self.stream.rq_depth),
        }
    }

    /// The engine configuration, by value (what the embedded engine is built from).
    #[cfg(feature = "embedded")]
    pub(crate) fn into_engine(self) -> EngineConfig {
        let mut engine = self.engine;
        engine.mpa = self.mpa;
        engine.stream = self.stream;
        engine
    }

    /// Ask the peer for CRC32c on every FPDU (MPA C bit; default on). A peer that asks
    /// for CRC gets it either way.
    pub fn crc(mut self, on: bool) -> Self {
        self.mpa.crc = on;
        self
    }

    /// Ask the peer to insert MPA markers in what it sends to us (M bit; default off,
    /// because siw rejects it). Markers a peer asks for are always honoured.
    pub fn markers(mut self, on: bool) -> Self {
        self.mpa.markers = on;
        self
    }

    /// Offer (and accept) FPDUs larger than one TCP segment, with Linux siw's experimental
    /// MPA bit (default off). Used only when the peer's frame carries the bit too (another
    /// stack like this one with it on, or siw built with `try_gso`); any other peer ignores
    /// the offer and gets segment-sized FPDUs. Worth it where the MTU is small: on a
    /// 1500-octet path an FPDU then carries up to 64 KiB instead of 1.4 KiB, with one header,
    /// one CRC call and one gather entry each. Hardware RNICs expect segment-sized FPDUs.
    pub fn large_fpdus(mut self, on: bool) -> Self {
        self.mpa.large_fpdus = on;
        self
    }

    /// This stack's extensions to offer (connecting) and accept (listening), default
    /// [`Extensions::ALL`](crate::Extensions::ALL). The offer is two reserved MPA bits
    /// that Linux siw and hardware RNICs ignore; an extension is used on a connection only
    /// when the peer is this stack and agreed ([`Qp::extensions`](crate::Qp::extensions)).
    pub fn extensions(mut self, set: crate::Extensions) -> Self {
        self.mpa.extensions = set;
        self
    }

    /// The MPA revision sent: 2 (RFC 6581, the default) or 1 (RFC 5044).
    pub fn mpa_revision(mut self, rev: u8) -> Self {
        self.mpa.rev = rev;
        self
    }

    /// The inbound and outbound RDMA Read/Atomic limits offered in MPA revision 2
    /// (14 bits each; 0x3FFF means "no limit negotiated"). Default 16 and 16.
    pub fn ird_ord(mut self, ird: u16, ord: u16) -> Self {
        self.mpa.ird = ird;
        self.mpa.ord = ord;
        self
    }

    /// Peer-to-peer mode (RFC 6581): as the initiator, ask for a ready-to-receive message
    /// of one of the `rtr` types; as the responder, accept those types. Default off.
    pub fn p2p(mut self, on: bool, rtr: RtrFlags) -> Self {
        self.mpa.p2p = on;
        self.mpa.rtr = rtr;
        self
    }

    /// The largest ULPDU this side sends (at least 128). The engine uses the smaller of
    /// this and what the connection's MSS allows. Default: no limit but the MSS.
    pub fn mulpdu(mut self, mulpdu: u16) -> Self {
        self.stream.mulpdu = mulpdu.max(128);
        self
    }

    /// Send- and receive-queue depths of every queue pair (default 256 each). A post to a
    /// full queue fails with [`PostError::QueueFull`](crate::PostError::QueueFull).
    pub fn queue_depths(mut self, sq: usize, rq: usize) -> Self {
        self.stream.sq_depth = sq;
        self.stream.rq_depth = rq;
        self
    }

    /// How long a TCP connect may take (default 10 s).
    #[cfg(feature = "embedded")]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.engine.connect_timeout = timeout;
        self
    }

    /// How long to wait for the peer's MPA Request or Reply (default 10 s; a listener
    /// waits at most 5 s for a Request).
    pub fn mpa_timeout(mut self, timeout: Duration) -> Self {
        self.mpa.timeout = timeout;
        self
    }

    /// End a connection on which nothing moved for `timeout` while nothing was
    /// outstanding (default `None`: a quiet connection stays up). Its queue pair then
    /// ends with [`QpEnd::TimedOut`](crate::QpEnd::TimedOut).
    #[cfg(feature = "embedded")]
    pub fn idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.engine.timeouts.idle = timeout;
        self
    }

    /// End a connection on which nothing moved for `timeout` while work was outstanding:
    /// a partial FPDU received, a request not complete, a response owed, octets TCP has
    /// not taken (default 60 s; `None`: never). The queue pair ends in Error with
    /// [`QpEnd::TimedOut`](crate::QpEnd::TimedOut) and its work is flushed.
    #[cfg(feature = "embedded")]
    pub fn stall_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.engine.timeouts.stall = timeout;
        self
    }

    /// The most connections a listener holds in the MPA handshake at once, and the most
    /// of those from one IP address (defaults 256 and 64); more are closed at once.
    #[cfg(feature = "embedded")]
    pub fn pending_handshakes(mut self, total: usize, per_address: usize) -> Self {
        self.engine.max_pending_handshakes = total.max(1);
        self.engine.max_pending_per_address = per_address.max(1);
        self
    }

    /// Time added to every registration queued with
    /// [`Pd::register_queued`](crate::Pd::register_queued) before it is done (embedded
    /// engine): emulates a slower control path, to see work requests wait for it. None by
    /// default.
    #[cfg(feature = "embedded")]
    pub fn registration_delay(mut self, delay: Duration) -> Self {
        self.engine.registration_delay = delay;
        self
    }

    /// How long a graceful close may take before the connection counts as lost (default
    /// 10 s).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.stream.close_timeout = timeout;
        self
    }

    /// Kernel socket buffer sizes (`SO_SNDBUF`, `SO_RCVBUF`); `None` keeps the system
    /// default.
    #[cfg(feature = "embedded")]
    pub fn socket_buffers(mut self, send: Option<usize>, recv: Option<usize>) -> Self {
        self.engine.socket.send_buffer = send;
        self.engine.socket.recv_buffer = recv;
        self
    }

    /// TCP_NODELAY (default on).
    #[cfg(feature = "embedded")]
    pub fn nodelay(mut self, on: bool) -> Self {
        self.engine.socket.nodelay = on;
        self
    }

    /// How long a connection polls its socket after answering a Read or Atomic, instead
    /// of sleeping until the kernel wakes it (default 50 us, as Linux's `busy_read`;
    /// zero turns it off). It keeps the responder's part, which no application thread
    /// does, at the floor, for a CPU's time up to this long after each response.
    #[cfg(feature = "embedded")]
    pub fn busy_poll(mut self, window: Duration) -> Self {
        self.engine.socket.busy_poll = window;
        self
    }

    /// Capture every connection of the device to a pcapng file at `path` (created now,
    /// truncated if it exists), for Wireshark/tshark: synthesized Ethernet/IP/TCP headers
    /// around the exact MPA octets sent and received (see
    /// the crate docs of `offload-engine`). Fails if the file cannot be created.
    #[cfg(feature = "embedded")]
    pub fn pcap(mut self, path: impl AsRef<Path>) -> std::io::Result<Self> {
        self.engine.pcap = Some(CaptureTap::create(path)?);
        Ok(self)
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use super::*;

    #[test]
    fn setters_reach_the_engine_config() {
        let cfg = DeviceConfig::new()
            .crc(false)
            .markers(true)
            .mpa_revision(1)
            .ird_ord(3, 4)
            .p2p(true, RtrFlags::SEND)
            .mulpdu(64)
            .queue_depths(7, 9)
            .connect_timeout(Duration::from_millis(5))
            .mpa_timeout(Duration::from_millis(6))
            .close_timeout(Duration::from_millis(7))
            .socket_buffers(Some(1 << 20), None)
            .nodelay(false);
        let e = cfg.into_engine();
        assert!(!e.mpa.crc && e.mpa.markers && e.mpa.p2p);
        assert_eq!((e.mpa.rev, e.mpa.ird, e.mpa.ord), (1, 3, 4));
        assert_eq!(e.mpa.rtr, RtrFlags::SEND);
        assert_eq!(e.stream.mulpdu, 128, "clamped to the minimum");
        assert_eq!((e.stream.sq_depth, e.stream.rq_depth), (7, 9));
        assert_eq!(e.connect_timeout, Duration::from_millis(5));
        assert_eq!(e.mpa.timeout, Duration::from_millis(6));
        assert_eq!(e.stream.close_timeout, Duration::from_millis(7));
        assert_eq!(e.socket.send_buffer, Some(1 << 20));
        assert!(!e.socket.nodelay);
    }

    #[test]
    fn pcap_creates_the_capture_file() {
        let path = std::env::temp_dir().join(format!("verbs-pcap-{}.pcapng", std::process::id()));
        let cfg = DeviceConfig::new().pcap(&path).unwrap();
        let e = cfg.into_engine();
        let tap = e.pcap.as_ref().expect("a tap");
        assert_eq!(tap.path(), Some(path.as_path()));
        let head = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).ok();
        // A pcapng Section Header Block starts the file.
        assert_eq!(head.get(..4), Some(&[0x0a, 0x0d, 0x0d, 0x0a][..]));
        assert!(
            DeviceConfig::new()
                .pcap("/nonexistent-dir/x.pcapng")
                .is_err()
        );
        assert!(DeviceConfig::new().into_engine().pcap.is_none());
    }

    #[test]
    fn defaults_are_the_engine_defaults() {
        let d = DeviceConfig::default().into_engine();
        let e = EngineConfig::default();
        assert_eq!(
            (d.mpa.rev, d.mpa.crc, d.mpa.markers),
            (e.mpa.rev, e.mpa.crc, false)
        );
        assert_eq!(d.stream.mulpdu, e.stream.mulpdu);
    }
}
