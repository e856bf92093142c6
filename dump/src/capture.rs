//! Capture files (pcap, pcapng) and link layers down to TCP segments.
//!
//! `pcap-file` reads the file formats (pcapng interface blocks give each packet its link
//! type); `etherparse` slices Ethernet, Linux cooked (SLL), IPv4/IPv6 and TCP. Linux cooked
//! v2 (SLL2) and BSD loopback/null have tiny fixed headers that are skipped here by hand.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use etherparse::{EtherType, NetSlice, SlicedPacket, TransportSlice};
use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};

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

/// Reads a pcap or pcapng capture held in memory (told apart by the first four octets).
///
/// A read error after some packets (a cut-off file) keeps the packets read so far.
pub fn read_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let mut capture = Capture::default();
    let add = |link: DataLink, data: &[u8], capture: &mut Capture| {
        capture.frames += 1;
        match tcp_segment(link, data, capture.frames) {
            Some(segment) => capture.segments.push(segment),
            None => capture.skipped += 1,
        }
    };
    if bytes.get(..4) == Some(&PCAPNG_MAGIC[..]) {
        let mut reader =
            PcapNgReader::new(bytes).map_err(|e| CaptureError(format!("pcapng: {e}")))?;
        while let Some(Ok(block)) = reader.next_block() {
            // The block borrows the reader: copy the packet out before asking for its
            // interface.
            let (iface, data): (usize, Vec<u8>) = match block {
                Block::EnhancedPacket(p) => (
                    usize::try_from(p.interface_id).unwrap_or(usize::MAX),
                    p.data.into_owned(),
                ),
                Block::SimplePacket(p) => (0, p.data.into_owned()),
                Block::Packet(p) => (usize::from(p.interface_id), p.data.into_owned()),
                _ => continue,
            };
            let link = reader.interfaces().get(iface).map(|i| i.linktype);
            add(
                link.unwrap_or(DataLink::Unknown(u32::MAX)),
                &data,
                &mut capture,
            );
        }
    } else {
        let mut reader = PcapReader::new(bytes).map_err(|e| CaptureError(format!("pcap: {e}")))?;
        let link = reader.header().datalink;
        while let Some(Ok(packet)) = reader.next_packet() {
            add(link, &packet.data, &mut capture);
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

    #[test]
    fn garbage_file() {
        assert!(read_capture(b"not a capture at all").is_err());
        assert!(read_capture(&[]).is_err());
    }
}
