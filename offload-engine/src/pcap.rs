//! The capture tap: a pcapng of the engine's own connections, for Wireshark/tshark.
//!
//! The engine talks through kernel TCP, so it sees octets, not packets. The tap writes
//! what a capture on the wire would hold, synthesized from those octets:
//!
//! * per connection an Ethernet + IPv4/IPv6 + TCP flow with the real addresses and ports
//!   (MAC addresses are made up: `02:69:77:00:00:01` is this engine, `..:02` the peer);
//! * a synthesized three-way handshake first. Userspace cannot read the kernel's initial
//!   sequence numbers, so each side gets a **synthetic ISN** (random per connection);
//!   sequence and acknowledgment numbers are then exact relative to it: every octet this
//!   engine wrote or read is there once, in order, and each side acknowledges what the other
//!   has sent so far (pure ACKs are added every 256 KiB of one-way traffic, and for FINs);
//! * the MPA Request/Reply octets alone in a segment, then every FPDU octet exactly as
//!   written or read, one FPDU per segment (tshark places markers from segment boundaries,
//!   so an FPDU with markers must neither share nor straddle segments). Segments are not cut
//!   at the kernel's MSS but only above 65495 octets (the IPv4 limit; an FPDU is at most
//!   about 65 KB); the SYNs advertise that limit as their MSS option;
//! * a FIN when this side shuts down or closes, and one when the peer's FIN is read;
//! * timestamps from the system clock when the octets were written or read (a segment is
//!   stamped when its last octet was seen), direction flags (inbound/outbound) per packet.
//!
//! Both directions come from this engine's point of view: what it sent and what it
//! received. Two engines tapping one connection write two views of it.

mod split;

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::fs::File;
use std::hash::BuildHasher as _;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etherparse::{PacketBuilder, TcpHeader, TcpOptionElement};
use pcap_file::DataLink;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::section_header::{SectionHeaderBlock, SectionHeaderOption};
use tokio::net::TcpStream;

use self::split::Splitter;

/// Largest TCP payload in one synthesized packet (IPv4 total length 65535 minus headers).
const MAX_SEGMENT: usize = 65_535 - 20 - 20;
/// Advertised window (scaled by [`WINDOW_SCALE`]: 8 MiB).
const WINDOW: u16 = 65_535;
/// Window scale option in both SYNs.
const WINDOW_SCALE: u8 = 7;
/// One-way octets after which the receiver gets a synthesized pure ACK.
const ACK_EVERY: u32 = 256 * 1024;
/// MAC address of this engine.
const MAC_LOCAL: [u8; 6] = [0x02, 0x69, 0x77, 0, 0, 1];
/// MAC address of the peer.
const MAC_PEER: [u8; 6] = [0x02, 0x69, 0x77, 0, 0, 2];
/// pcapng EPB flags: inbound / outbound direction.
const EPB_INBOUND: u32 = 0b01;
const EPB_OUTBOUND: u32 = 0b10;

/// A pcapng capture of every connection of the engines it is given to (through
/// [`EngineConfig::pcap`](crate::EngineConfig::pcap)). Cheap to clone; clones write to the
/// same file through one writer, so give every engine of a program a clone of one tap:
/// two taps made with [`create`](Self::create) on one path truncate each other's file.
/// Packets are flushed to the file as they are written, so the file can be read while
/// the engine runs. A write error is logged once, then the tap stops writing.
///
/// The file is opened for appending, and whole blocks reach it in one write each, so
/// blocks never interleave even when another process appends to the same file (an
/// upgraded daemon's successor, made with [`append`](Self::append)): each tap writes a
/// section of its own with the same interface, so a reader decodes every packet
/// whichever section it falls in.
#[derive(Clone)]
pub struct CaptureTap {
    inner: Arc<Inner>,
}

struct Inner {
    path: Option<PathBuf>,
    sink: Mutex<Sink>,
}

struct Sink {
    /// Whole pcapng blocks not written to `out` yet.
    blocks: Option<PcapNgWriter<Vec<u8>>>,
    /// Where they go.
    out: Box<dyn Write + Send>,
}

/// Buffered blocks beyond this are written at once, without waiting for a flush.
const FLUSH_AT: usize = 1 << 20;

impl fmt::Debug for CaptureTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaptureTap")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl CaptureTap {
    /// Creates (or truncates) the pcapng file at `path` and writes its section and
    /// interface headers.
    pub fn create(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        let file = Self::open(path)?;
        file.set_len(0).map_err(|e| named(path, e))?;
        Self::build(Box::new(file), Some(path.to_owned()))
    }

    /// Opens the pcapng file at `path` to add to it (creating it if there is none): the
    /// capture goes on after what the file holds, in a section of its own. This is how a
    /// process that takes over from another (an upgraded daemon) continues that one's
    /// capture without cutting it off.
    pub fn append(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        Self::build(Box::new(Self::open(path)?), Some(path.to_owned()))
    }

    fn open(path: &Path) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| named(path, e))
    }

    /// A tap writing pcapng to `writer` (for example an in-memory buffer).
    pub fn to_writer(writer: impl Write + Send + 'static) -> io::Result<Self> {
        Self::build(Box::new(writer), None)
    }

    fn build(out: Box<dyn Write + Send>, path: Option<PathBuf>) -> io::Result<Self> {
        let section = SectionHeaderBlock {
            options: vec![
                SectionHeaderOption::UserApplication(Cow::Borrowed(
                    "offload-engine capture tap (iWARP)",
                )),
                SectionHeaderOption::Comment(Cow::Borrowed(
                    "Ethernet, IP and TCP headers are synthesized from the octets one engine \
                     wrote and read on kernel TCP sockets; MAC addresses and TCP initial \
                     sequence numbers are synthetic.",
                )),
            ],
            ..SectionHeaderBlock::default()
        };
        let mut blocks =
            PcapNgWriter::with_section_header(Vec::new(), section).map_err(pcap_err)?;
        let interface = InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![
                InterfaceDescriptionOption::IfName(Cow::Borrowed("iwarp-tap")),
                // pcap-file writes EPB timestamps in nanoseconds.
                InterfaceDescriptionOption::IfTsResol(9),
            ],
        };
        blocks.write_pcapng_block(interface).map_err(pcap_err)?;
        let mut sink = Sink {
            blocks: Some(blocks),
            out,
        };
        sink.flush()?;
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                sink: Mutex::new(sink),
            }),
        })
    }

    /// The file it writes, when made by [`create`](Self::create) or
    /// [`append`](Self::append).
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Flushes buffered packets to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.sink().flush()
    }

    fn sink(&self) -> std::sync::MutexGuard<'_, Sink> {
        self.inner.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one Ethernet frame; `outbound` when this engine sent it.
    fn write(&self, frame: &[u8], outbound: bool) {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let flags = if outbound { EPB_OUTBOUND } else { EPB_INBOUND };
        let block = EnhancedPacketBlock {
            interface_id: 0,
            timestamp,
            original_len: u32::try_from(frame.len()).unwrap_or(u32::MAX),
            data: Cow::Borrowed(frame),
            options: vec![EnhancedPacketOption::Flags(flags)],
        };
        let mut sink = self.sink();
        let Some(w) = &mut sink.blocks else {
            return;
        };
        let written = match w.write_pcapng_block(block) {
            Ok(_) if w.get_ref().len() >= FLUSH_AT => sink.flush(),
            Ok(_) => Ok(()),
            Err(e) => Err(pcap_err(e)),
        };
        if let Err(e) = written {
            tracing::warn!(path = ?self.inner.path, error = %e, "capture tap stopped");
            sink.blocks = None;
        }
    }

    fn flush_quietly(&self) {
        let mut sink = self.sink();
        if let Err(e) = sink.flush() {
            tracing::warn!(path = ?self.inner.path, error = %e, "capture tap stopped");
            sink.blocks = None;
        }
    }

    /// Starts the capture of a connected socket: writes the synthesized TCP handshake.
    pub(crate) fn connection(&self, sock: &TcpStream, initiator: bool) -> Tap {
        let (Ok(local), Ok(peer)) = (sock.local_addr(), sock.peer_addr()) else {
            return Tap::off();
        };
        Tap(Some(ConnTap::open(
            self.clone(),
            local,
            peer,
            MAX_SEGMENT,
            initiator,
        )))
    }
}

impl Sink {
    /// Writes the buffered blocks to the file in one write: whole blocks, never a part of
    /// one, so another writer appending to the file cannot split a block.
    fn flush(&mut self) -> io::Result<()> {
        let Some(w) = &mut self.blocks else {
            return Ok(());
        };
        let buf = w.get_mut();
        if buf.is_empty() {
            return Ok(());
        }
        let written = self.out.write_all(buf).and_then(|()| self.out.flush());
        buf.clear();
        written
    }
}

/// `e` with the file's name in it.
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("capture file {}: {e}", path.display()))
}

fn pcap_err(e: pcap_file::PcapError) -> io::Error {
    match e {
        pcap_file::PcapError::IoError(e) => e,
        other => io::Error::other(other),
    }
}

/// A connection's capture, or nothing when the engine has no tap. Every method is a no-op
/// without a tap.
#[derive(Debug, Default)]
pub(crate) struct Tap(Option<ConnTap>);

impl Tap {
    /// No capture.
    pub(crate) fn off() -> Self {
        Self(None)
    }

    /// True if it records.
    pub(crate) fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// This engine wrote `data` to the socket.
    pub(crate) fn sent(&mut self, data: &[u8]) {
        if let Some(t) = &mut self.0 {
            t.ours.split.push(data);
            t.pump();
        }
    }

    /// This engine read `data` from the socket.
    pub(crate) fn received(&mut self, data: &[u8]) {
        if let Some(t) = &mut self.0 {
            t.theirs.split.push(data);
            t.pump();
        }
    }

    /// This engine shut down its sending half (FIN).
    pub(crate) fn sent_fin(&mut self) {
        if let Some(t) = &mut self.0 {
            t.fin(true);
            t.sink.flush_quietly();
        }
    }

    /// The peer's FIN arrived (a read returned 0).
    pub(crate) fn received_fin(&mut self) {
        if let Some(t) = &mut self.0 {
            t.fin(false);
            t.sink.flush_quietly();
        }
    }
}

/// One side of the TCP flow.
#[derive(Debug)]
struct Side {
    split: Splitter,
    /// Sequence number of its next octet.
    next: u32,
    /// The acknowledgment number it sent last.
    acked: u32,
    /// Its FIN has been written.
    fin: bool,
}

impl Side {
    fn new(isn: u32, max_seg: usize) -> Self {
        Self {
            split: Splitter::new(max_seg.min(MAX_SEGMENT)),
            next: isn,
            acked: 0,
            fin: false,
        }
    }
}

/// TCP control bits of a synthesized packet (ACK is implied except on the first SYN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctl {
    Syn,
    SynAck,
    Ack,
    Data,
    Fin,
}

/// The capture of one connection.
#[derive(Debug)]
struct ConnTap {
    sink: CaptureTap,
    local: SocketAddr,
    peer: SocketAddr,
    /// The MSS option of both SYNs: the largest segment this capture holds.
    mss: u16,
    /// This engine's side.
    ours: Side,
    /// The peer's side.
    theirs: Side,
}

impl ConnTap {
    fn open(
        sink: CaptureTap,
        local: SocketAddr,
        peer: SocketAddr,
        max_seg: usize,
        initiator: bool,
    ) -> Self {
        let random = RandomState::new();
        let mut t = Self {
            sink,
            local,
            peer,
            mss: u16::try_from(max_seg.min(MAX_SEGMENT)).unwrap_or(u16::MAX),
            ours: Side::new(random.hash_one((local, peer, 1u8)) as u32, max_seg),
            theirs: Side::new(random.hash_one((local, peer, 2u8)) as u32, max_seg),
        };
        t.emit(initiator, Ctl::Syn, &[]);
        t.emit(!initiator, Ctl::SynAck, &[]);
        t.emit(initiator, Ctl::Ack, &[]);
        t.sink.flush_quietly();
        t
    }

    /// Writes every segment that is complete, in both directions.
    fn pump(&mut self) {
        let mut segs = Vec::new();
        loop {
            let (ours_frame, theirs_frame) = (self.ours.split.frame(), self.theirs.split.frame());
            self.ours.split.drain(theirs_frame, &mut segs);
            let n_ours = segs.len();
            self.theirs.split.drain(self.ours.split.frame(), &mut segs);
            if segs.is_empty() {
                break;
            }
            for (i, seg) in segs.drain(..).enumerate() {
                self.data(i < n_ours, &seg);
            }
            // A frame seen just now may unblock FPDUs queued in the other direction.
            if (self.ours.split.frame(), self.theirs.split.frame()) == (ours_frame, theirs_frame) {
                break;
            }
        }
        self.sink.flush_quietly();
    }

    /// Writes a data segment from `ours` or theirs, plus a pure ACK back when the receiver
    /// owes one.
    fn data(&mut self, ours: bool, payload: &[u8]) {
        self.emit(ours, Ctl::Data, payload);
        let (src, dst) = self.sides(ours);
        if src.next.wrapping_sub(dst.acked) >= ACK_EVERY {
            self.emit(!ours, Ctl::Ack, &[]);
        }
    }

    /// Writes what is left of one direction, then its FIN (once).
    fn fin(&mut self, ours: bool) {
        if self.sides(ours).0.fin {
            return;
        }
        self.pump();
        let mut segs = Vec::new();
        let side = if ours {
            &mut self.ours
        } else {
            &mut self.theirs
        };
        side.split.flush(&mut segs);
        for seg in segs {
            self.data(ours, &seg);
        }
        self.emit(ours, Ctl::Fin, &[]);
        let side = if ours {
            &mut self.ours
        } else {
            &mut self.theirs
        };
        side.fin = true;
    }

    fn sides(&self, ours: bool) -> (&Side, &Side) {
        if ours {
            (&self.ours, &self.theirs)
        } else {
            (&self.theirs, &self.ours)
        }
    }

    /// Builds and writes one packet from `ours` (this engine) or the peer.
    fn emit(&mut self, ours: bool, ctl: Ctl, payload: &[u8]) {
        let (src, dst) = self.sides(ours);
        let (seq, ack) = (src.next, dst.next);
        let (src_addr, dst_addr) = if ours {
            (self.local, self.peer)
        } else {
            (self.peer, self.local)
        };
        let mut tcp = TcpHeader::new(src_addr.port(), dst_addr.port(), seq, WINDOW);
        tcp.syn = matches!(ctl, Ctl::Syn | Ctl::SynAck);
        tcp.fin = ctl == Ctl::Fin;
        tcp.psh = ctl == Ctl::Data;
        tcp.ack = ctl != Ctl::Syn;
        if tcp.ack {
            tcp.acknowledgment_number = ack;
        }
        if tcp.syn {
            let opts = [
                TcpOptionElement::MaximumSegmentSize(self.mss),
                TcpOptionElement::Noop,
                TcpOptionElement::WindowScale(WINDOW_SCALE),
            ];
            if let Err(e) = tcp.set_options(&opts) {
                tracing::debug!(error = %e, "capture tap: TCP options");
            }
        }
        let macs = if ours {
            (MAC_LOCAL, MAC_PEER)
        } else {
            (MAC_PEER, MAC_LOCAL)
        };
        let eth = PacketBuilder::ethernet2(macs.0, macs.1);
        let ip = match (src_addr.ip().to_canonical(), dst_addr.ip().to_canonical()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => eth.ipv4(s.octets(), d.octets(), 64),
            _ => eth.ipv6(v6(src_addr.ip()), v6(dst_addr.ip()), 64),
        };
        let (has_ack, step) = (
            tcp.ack,
            payload.len() as u32 + u32::from(tcp.syn || tcp.fin),
        );
        let builder = ip.tcp_header(tcp);
        let mut frame = Vec::with_capacity(builder.size(payload.len()));
        if let Err(e) = builder.write(&mut frame, payload) {
            tracing::debug!(error = %e, "capture tap: packet not built");
            return;
        }
        self.sink.write(&frame, ours);
        let side = if ours {
            &mut self.ours
        } else {
            &mut self.theirs
        };
        side.next = side.next.wrapping_add(step);
        if has_ack {
            side.acked = ack;
        }
    }
}

fn v6(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

impl Drop for ConnTap {
    /// The socket closes with the capture: this side's FIN if not sent yet, then the ACKs
    /// of the FINs that would follow.
    fn drop(&mut self) {
        self.pump();
        let mut segs = Vec::new();
        self.theirs.split.flush(&mut segs);
        for seg in segs {
            self.data(false, &seg);
        }
        self.fin(true);
        if self.theirs.fin && self.ours.acked != self.theirs.next {
            self.emit(true, Ctl::Ack, &[]);
        }
        if self.theirs.acked != self.ours.next {
            self.emit(false, Ctl::Ack, &[]);
        }
        self.sink.flush_quietly();
    }
}

#[cfg(test)]
mod tests;
