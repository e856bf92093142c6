//! Capture files (pcap, pcapng) and link layers down to TCP segments.
//!
//! `pcap-file` reads the file formats (pcapng interface blocks give each packet its link
//! type); `etherparse` slices Ethernet, Linux cooked (SLL), IPv4/IPv6 and TCP. Linux cooked
//! v2 (SLL2) and BSD loopback/null have tiny fixed headers that are skipped here by hand.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use etherparse::{EtherType, NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, Endianness, PcapError};

use crate::damage::{Damage, DamageKind, MAX_BLOCK_LEN, MAX_PACKET_LEN};

/// Length of the Linux cooked v2 (SLL2) header; its first two octets are the EtherType.
const SLL2_HEADER_LEN: usize = 20;
/// Length of the BSD loopback/null header (the address family, 4 octets).
const NULL_HEADER_LEN: usize = 4;
/// First four octets of a pcapng file (Section Header Block type).
const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// One TCP segment taken from a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSegment {
    /// Frame number in the capture, 1-based as in Wireshark.
    pub frame: u64,
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// TCP sequence number.
    pub seq: u32,
    /// SYN flag.
    pub syn: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// TCP payload (padding after the IP datagram removed).
    pub payload: Vec<u8>,
}

/// The TCP segments of a capture, in capture order.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// Number of packet records (frames) in the file.
    pub frames: u64,
    /// Frames that were not TCP over IP on a supported link type (or were cut short).
    pub skipped: u64,
    /// TCP segments in capture order.
    pub segments: Vec<TcpSegment>,
    /// Why the file could not be read to its end, if it could not (what was read before
    /// is above).
    pub damage: Option<Damage>,
}

/// Why a capture file could not be read.
#[derive(Debug)]
pub struct CaptureError(String);

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CaptureError {}

impl CaptureError {
    /// An error with this message.
    pub fn new(message: String) -> Self {
        Self(message)
    }
}

impl Capture {
    fn add(&mut self, link: DataLink, data: &[u8]) {
        self.frames += 1;
        match tcp_segment(link, data, self.frames) {
            Some(segment) => self.segments.push(segment),
            None => self.skipped += 1,
        }
    }

    /// Reading stopped at `rest` (the unread end of `bytes`) for `error`.
    fn stop(&mut self, bytes: &[u8], rest: &[u8], error: PcapError) {
        let kind = match error {
            PcapError::IncompleteBuffer => DamageKind::CutShort,
            other => DamageKind::Corrupt(other.to_string()),
        };
        self.stop_for(bytes, rest, kind);
    }

    fn stop_for(&mut self, bytes: &[u8], rest: &[u8], kind: DamageKind) {
        self.damage = Some(Damage {
            kind,
            offset: bytes.len() - rest.len(),
            file_len: bytes.len(),
            frames: self.frames,
        });
    }
}

/// Reads a pcap or pcapng capture held in memory (told apart by the first four octets).
///
/// A file that cannot be read to its end (cut short, or damaged after some packets)
/// keeps the packets read so far and says why in [`Capture::damage`]; one that cannot be
/// read at all is an error.
pub fn read_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    if bytes.get(..4) == Some(&PCAPNG_MAGIC[..]) {
        read_pcapng(bytes)
    } else {
        read_pcap(bytes)
    }
}

fn read_pcapng(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut capture = Capture::default();
    let (mut rest, mut parser) =
        PcapNgParser::new(bytes).map_err(|e| CaptureError(format!("pcapng: {e}")))?;
    while !rest.is_empty() {
        if let Some(why) = block_too_large(rest, parser.section().endianness) {
            capture.stop_for(bytes, rest, DamageKind::Corrupt(why));
            break;
        }
        // The block borrows the parser's input only: copy the packet out before asking
        // for its interface.
        let (next, data): (&[u8], Option<(u32, Vec<u8>)>) = match parser.next_block(rest) {
            Ok((next, Block::EnhancedPacket(p))) => {
                (next, Some((p.interface_id, p.data.into_owned())))
            }
            Ok((next, Block::SimplePacket(p))) => (next, Some((0, p.data.into_owned()))),
            Ok((next, Block::Packet(p))) => {
                (next, Some((u32::from(p.interface_id), p.data.into_owned())))
            }
            Ok((next, _)) => (next, None),
            Err(e) => {
                capture.stop(bytes, rest, e);
                break;
            }
        };
        if let Some((iface, data)) = data {
            let link = usize::try_from(iface)
                .ok()
                .and_then(|i| parser.interfaces().get(i))
                .map(|i| i.linktype);
            capture.add(link.unwrap_or(DataLink::Unknown(u32::MAX)), &data);
        }
        rest = next;
    }
    Ok(capture)
}

/// The complaint about the block at the start of `rest` if its total length is beyond
/// what any writer produces ([`MAX_BLOCK_LEN`]), as tshark words it.
fn block_too_large(rest: &[u8], section: Endianness) -> Option<String> {
    let len: [u8; 4] = rest.get(4..8)?.try_into().ok()?;
    // A new section says its byte order with its magic.
    let big = if rest.get(..4) == Some(&PCAPNG_MAGIC[..]) {
        rest.get(8..12)? == [0x1a, 0x2b, 0x3c, 0x4d]
    } else {
        section == Endianness::Big
    };
    let len = if big {
        u32::from_be_bytes(len)
    } else {
        u32::from_le_bytes(len)
    };
    (len > MAX_BLOCK_LEN)
        .then(|| format!("pcapng: total block length {len} is too large (> {MAX_BLOCK_LEN})"))
}

fn read_pcap(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut capture = Capture::default();
    let (mut rest, parser) =
        PcapParser::new(bytes).map_err(|e| CaptureError(format!("pcap: {e}")))?;
    let header = parser.header();
    while !rest.is_empty() {
        // The record's captured length, in the file's byte order.
        if let Some(len) = rest.get(8..12).and_then(|b| <[u8; 4]>::try_from(b).ok()) {
            let len = match header.endianness {
                Endianness::Big => u32::from_be_bytes(len),
                Endianness::Little => u32::from_le_bytes(len),
            };
            if len > MAX_PACKET_LEN {
                let why = format!(
                    "pcap: File has {len}-byte packet, bigger than maximum of {MAX_PACKET_LEN}"
                );
                capture.stop_for(bytes, rest, DamageKind::Corrupt(why));
                break;
            }
        }
        match parser.next_packet(rest) {
            Ok((next, packet)) => {
                capture.add(header.datalink, &packet.data);
                rest = next;
            }
            Err(e) => {
                capture.stop(bytes, rest, e);
                break;
            }
        }
    }
    Ok(capture)
}

/// Decodes one frame of link type `link` down to its TCP segment, or `None` if it is not
/// TCP over IPv4/IPv6 (or is malformed or truncated).
pub fn tcp_segment(link: DataLink, data: &[u8], frame: u64) -> Option<TcpSegment> {
    let sliced = match link {
        DataLink::ETHERNET => SlicedPacket::from_ethernet(data),
        DataLink::LINUX_SLL => SlicedPacket::from_linux_sll(data),
        DataLink::LINUX_SLL2 => {
            let proto = u16::from_be_bytes([*data.first()?, *data.get(1)?]);
            SlicedPacket::from_ether_type(EtherType(proto), data.get(SLL2_HEADER_LEN..)?)
        }
        DataLink::NULL | DataLink::LOOP => SlicedPacket::from_ip(data.get(NULL_HEADER_LEN..)?),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => SlicedPacket::from_ip(data),
        _ => return None,
    }
    .ok()?;
    let (src_ip, dst_ip): (IpAddr, IpAddr) = match sliced.net? {
        NetSlice::Ipv4(ip) => (
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
        ),
        NetSlice::Ipv6(ip) => (
            ip.header().source_addr().into(),
            ip.header().destination_addr().into(),
        ),
        NetSlice::Arp(_) => return None,
    };
    let TransportSlice::Tcp(tcp) = sliced.transport? else {
        return None;
    };
    Some(TcpSegment {
        frame,
        src: SocketAddr::new(src_ip, tcp.source_port()),
        dst: SocketAddr::new(dst_ip, tcp.destination_port()),
        seq: tcp.sequence_number(),
        syn: tcp.syn(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload().to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_over_ipv4(payload: &[u8]) -> Vec<u8> {
        let builder = PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(4000, 7174, 1000, 65535)
            .syn();
        let mut out = Vec::new();
        builder.write(&mut out, payload).unwrap();
        out
    }

    #[test]
    fn link_types() {
        let ip = tcp_over_ipv4(b"abc");
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&ip);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0; SLL2_HEADER_LEN - 2]);
        sll2.extend_from_slice(&ip);
        let mut null = 2u32.to_le_bytes().to_vec();
        null.extend_from_slice(&ip);
        for (link, data) in [
            (DataLink::ETHERNET, &eth),
            (DataLink::LINUX_SLL2, &sll2),
            (DataLink::NULL, &null),
            (DataLink::RAW, &ip),
        ] {
            let s = tcp_segment(link, data, 7).unwrap_or_else(|| panic!("{link:?}"));
            assert_eq!(s.src, "10.0.0.1:4000".parse().unwrap());
            assert_eq!(s.dst, "10.0.0.2:7174".parse().unwrap());
            assert_eq!((s.seq, s.syn, s.fin, s.frame), (1000, true, false, 7));
            assert_eq!(s.payload, b"abc");
        }
        // Ethernet padding after the IP datagram is not payload.
        let mut padded = eth.clone();
        padded.extend_from_slice(&[0; 8]);
        assert_eq!(
            tcp_segment(DataLink::ETHERNET, &padded, 1).unwrap().payload,
            b"abc"
        );
    }

    #[test]
    fn not_tcp_or_truncated() {
        assert!(tcp_segment(DataLink::ETHERNET, &[0; 10], 1).is_none());
        assert!(tcp_segment(DataLink::LINUX_SLL2, &[0x08], 1).is_none());
        assert!(tcp_segment(DataLink::Unknown(147), &[0; 64], 1).is_none());
        let ip = tcp_over_ipv4(b"abcdef");
        assert!(tcp_segment(DataLink::RAW, &ip[..ip.len() - 3], 1).is_none());
    }

    /// A pcapng file of `n` Ethernet frames, each a TCP segment; with the offsets of the
    /// blocks' ends.
    fn pcapng(n: usize) -> (Vec<u8>, Vec<usize>) {
        use pcap_file::pcapng::PcapNgWriter;
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        let mut w = PcapNgWriter::new(Vec::new()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
        let mut ends = vec![w.get_ref().len()];
        let mut eth = vec![0u8; 12];
        eth.extend_from_slice(&[0x08, 0x00]);
        eth.extend_from_slice(&tcp_over_ipv4(&[7; 100]));
        for _ in 0..n {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: std::time::Duration::ZERO,
                original_len: eth.len() as u32,
                data: eth.clone().into(),
                options: vec![],
            })
            .unwrap();
            ends.push(w.get_ref().len());
        }
        (w.into_inner(), ends)
    }

    #[test]
    fn a_whole_file_reads_without_damage() {
        let (file, _) = pcapng(5);
        let c = read_capture(&file).unwrap();
        assert_eq!((c.frames, c.segments.len(), c.damage), (5, 5, None));
    }

    #[test]
    fn a_file_cut_short_keeps_what_was_read_and_says_where() {
        let (file, ends) = pcapng(5);
        // Cut inside the fourth packet's block.
        let cut = ends[3] + 10;
        let c = read_capture(&file[..cut]).unwrap();
        assert_eq!(c.frames, 3);
        let d = c.damage.expect("cut short");
        assert_eq!(
            (d.kind, d.offset, d.file_len, d.frames),
            (DamageKind::CutShort, ends[3], cut, 3)
        );
        // Classic pcap too.
        let mut pcap = Vec::new();
        {
            use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
            let header = PcapHeader {
                datalink: DataLink::RAW,
                ..PcapHeader::default()
            };
            let mut w = PcapWriter::with_header(&mut pcap, header).unwrap();
            let ip = tcp_over_ipv4(b"abc");
            for _ in 0..2 {
                w.write_packet(&PcapPacket::new(
                    std::time::Duration::ZERO,
                    ip.len() as u32,
                    &ip,
                ))
                .unwrap();
            }
        }
        let c = read_capture(&pcap[..pcap.len() - 1]).unwrap();
        assert_eq!(c.frames, 1);
        assert_eq!(c.damage.unwrap().kind, DamageKind::CutShort);
    }

    #[test]
    fn a_block_length_no_writer_makes_is_corruption() {
        let (mut file, ends) = pcapng(4);
        // Two writers truncating one file: another block's octets where a length is due.
        file[ends[2] + 4..ends[2] + 8].copy_from_slice(&1_861_917_376u32.to_le_bytes());
        let c = read_capture(&file).unwrap();
        assert_eq!(c.frames, 2);
        let d = c.damage.unwrap();
        assert_eq!(d.offset, ends[2]);
        assert_eq!(
            d.kind,
            DamageKind::Corrupt(
                "pcapng: total block length 1861917376 is too large (> 16777216)".into()
            )
        );
        // A trailer that does not repeat the length.
        let (mut file, ends) = pcapng(4);
        file[ends[2] - 4] ^= 4;
        let d = read_capture(&file).unwrap().damage.unwrap();
        assert!(matches!(d.kind, DamageKind::Corrupt(_)), "{d:?}");
        assert_eq!(d.frames, 1);
    }

    #[test]
    fn garbage_file() {
        assert!(read_capture(b"not a capture at all").is_err());
        assert!(read_capture(&[]).is_err());
    }
}
