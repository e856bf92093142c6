//! The tap's output read back with pcap-file and etherparse: handshake, segmentation,
//! sequence/acknowledgment bookkeeping, FINs, directions, IPv6.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use mpa::Framer;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketOption;
use pcap_file::pcapng::{Block, PcapNgReader};

use super::*;

/// A `Write` whose bytes the test can read while the tap still holds it.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One packet as read back.
#[derive(Debug)]
struct Pkt {
    outbound: bool,
    v6: bool,
    src: u16,
    syn: bool,
    ack: Option<u32>,
    fin: bool,
    seq: u32,
    payload: Vec<u8>,
    checksum_ok: bool,
}

fn read_back(buf: &Shared) -> Vec<Pkt> {
    let data = buf.0.lock().unwrap().clone();
    let mut reader = PcapNgReader::new(&data[..]).unwrap();
    let mut out = Vec::new();
    while let Some(block) = reader.next_block() {
        let Block::EnhancedPacket(epb) = block.unwrap() else {
            continue;
        };
        let outbound = epb
            .options
            .iter()
            .any(|o| matches!(o, EnhancedPacketOption::Flags(f) if f & 3 == EPB_OUTBOUND));
        let h = PacketHeaders::from_ethernet_slice(&epb.data).unwrap();
        let Some(TransportHeader::Tcp(tcp)) = h.transport else {
            panic!("not TCP")
        };
        let payload = h.payload.slice().to_vec();
        let (v6, checksum_ok) = match h.net {
            Some(NetHeaders::Ipv4(ip, _)) => (
                false,
                tcp.calc_checksum_ipv4(&ip, &payload).unwrap() == tcp.checksum,
            ),
            Some(NetHeaders::Ipv6(ip, _)) => (
                true,
                tcp.calc_checksum_ipv6(&ip, &payload).unwrap() == tcp.checksum,
            ),
            other => panic!("not IP: {other:?}"),
        };
        out.push(Pkt {
            outbound,
            v6,
            src: tcp.source_port,
            syn: tcp.syn,
            ack: tcp.ack.then_some(tcp.acknowledgment_number),
            fin: tcp.fin,
            seq: tcp.sequence_number,
            payload,
            checksum_ok,
        });
    }
    out
}

/// Checks that every packet continues its direction's sequence space and acknowledges
/// exactly what the other direction had sent before it; returns the two byte streams.
fn check_flow(pkts: &[Pkt]) -> (Vec<u8>, Vec<u8>) {
    let mut next: [Option<u32>; 2] = [None, None];
    let mut streams = (Vec::new(), Vec::new());
    for p in pkts {
        let (me, other) = if p.outbound { (0, 1) } else { (1, 0) };
        if let Some(n) = next[me] {
            assert_eq!(p.seq, n, "sequence gap in {p:?}");
        } else {
            assert!(p.syn, "first packet of a side is its SYN");
        }
        if let Some(ack) = p.ack {
            assert_eq!(Some(ack), next[other], "ack of {p:?}");
        }
        assert!(p.checksum_ok, "TCP checksum of {p:?}");
        next[me] = Some(
            p.seq
                .wrapping_add(p.payload.len() as u32 + u32::from(p.syn || p.fin)),
        );
        if p.outbound {
            streams.0.extend_from_slice(&p.payload);
        } else {
            streams.1.extend_from_slice(&p.payload);
        }
    }
    streams
}

fn frame(key: &[u8; 16], flags: u8) -> Vec<u8> {
    let mut v = key.to_vec();
    v.extend_from_slice(&[flags, 1, 0, 2, b'p', b'd']);
    v
}

fn fpdus(markers: bool, sizes: &[usize]) -> Vec<Vec<u8>> {
    let mut framer = Framer::new(markers, true);
    sizes
        .iter()
        .map(|&n| {
            let mut wire = BytesMut::new();
            framer.encode(&[0x41; 18], &vec![0x5a; n], &mut wire);
            wire.to_vec()
        })
        .collect()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn a_connection_reads_back_as_one_consistent_tcp_flow() {
    let buf = Shared::default();
    let sink = CaptureTap::to_writer(buf.clone()).unwrap();
    let (local, peer) = (addr("127.0.0.1:40000"), addr("127.0.0.1:4791"));
    let mut tap = Tap(Some(ConnTap::open(sink, local, peer, 1460, true)));
    // Markers both ways, so FPDU boundaries depend on the marker rule.
    let req = frame(&mpa::wire::frame::KEY_REQUEST, 0xc0);
    let rep = frame(&mpa::wire::frame::KEY_REPLY, 0xc0);
    let ours = fpdus(true, &[100, 700, 3]);
    let theirs = fpdus(true, &[1000, 5]);
    tap.sent(&req);
    // The Reply and both of the peer's FPDUs arrive in odd chunks.
    let mut rx = rep.clone();
    rx.extend(theirs.concat());
    for chunk in rx.chunks(77) {
        tap.received(chunk);
    }
    // Our FPDUs go out in one vectored write cut in the middle of the second.
    let tx = ours.concat();
    tap.sent(&tx[..300]);
    tap.sent(&tx[300..]);
    tap.received_fin();
    drop(tap);

    let pkts = read_back(&buf);
    let (sent, received) = check_flow(&pkts);
    let mut all_tx = req.clone();
    all_tx.extend(&tx);
    assert_eq!(sent, all_tx);
    assert_eq!(received, rx);
    // SYN from us, SYN-ACK from the peer, ACK from us.
    assert!(pkts[0].syn && pkts[0].outbound && pkts[0].ack.is_none());
    assert!(pkts[1].syn && !pkts[1].outbound && pkts[1].ack.is_some());
    assert!(!pkts[2].syn && pkts[2].outbound && pkts[2].payload.is_empty());
    assert!(pkts.iter().all(|p| !p.v6));
    assert_eq!((pkts[0].src, pkts[1].src), (40000, 4791));
    // Data segments: exactly the frames and one FPDU each.
    let data: Vec<&Vec<u8>> = pkts
        .iter()
        .filter(|p| !p.payload.is_empty())
        .map(|p| &p.payload)
        .collect();
    let mut expect = vec![&req, &rep];
    expect.extend(theirs.iter());
    expect.extend(ours.iter());
    assert_eq!(data, expect);
    // FINs: the peer's, then ours, then the peer's ACK of ours.
    let fins: Vec<bool> = pkts.iter().filter(|p| p.fin).map(|p| p.outbound).collect();
    assert_eq!(fins, [false, true]);
    let last = pkts.last().unwrap();
    assert!(!last.outbound && !last.fin && last.payload.is_empty());
}

#[test]
fn one_way_bulk_gets_acks_and_large_fpdus_are_cut_at_the_segment_limit() {
    let buf = Shared::default();
    let sink = CaptureTap::to_writer(buf.clone()).unwrap();
    let (local, peer) = (addr("[::1]:4791"), addr("[::1]:50000"));
    let mut tap = Tap(Some(ConnTap::open(sink, local, peer, 9000, false)));
    tap.received(&frame(&mpa::wire::frame::KEY_REQUEST, 0x40));
    tap.sent(&frame(&mpa::wire::frame::KEY_REPLY, 0x40));
    let big = fpdus(false, &[20_000; 40]);
    for f in &big {
        tap.sent(f);
    }
    tap.sent_fin();
    drop(tap);
    let pkts = read_back(&buf);
    check_flow(&pkts);
    assert!(pkts.iter().all(|p| p.v6));
    // The responder's view: the SYN comes from the peer.
    assert!(pkts[0].syn && !pkts[0].outbound);
    let data: Vec<usize> = pkts
        .iter()
        .filter(|p| p.outbound && !p.payload.is_empty())
        .map(|p| p.payload.len())
        .collect();
    assert!(data.iter().all(|&n| n <= 9000), "{data:?}");
    assert_eq!(data.iter().sum::<usize>(), 22 + big.concat().len());
    let acks = pkts
        .iter()
        .filter(|p| !p.outbound && p.payload.is_empty() && !p.syn)
        .count();
    // The handshake's third packet, an ACK per 256 KiB of the 800 KB, the ACK of our FIN.
    assert_eq!(acks, 1 + 3 + 1, "{acks}");
}

#[test]
fn no_tap_records_nothing_and_write_errors_stop_the_tap() {
    let mut off = Tap::off();
    off.sent(b"x");
    off.received_fin();

    struct Failing;
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::other("disk full"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    assert!(CaptureTap::to_writer(Failing).is_err());
}

#[test]
fn create_writes_a_readable_file() {
    let path = std::env::temp_dir().join(format!("tap-unit-{}.pcapng", std::process::id()));
    let tap = CaptureTap::create(&path).unwrap();
    assert_eq!(tap.path(), Some(path.as_path()));
    {
        let mut t = Tap(Some(ConnTap::open(
            tap.clone(),
            addr("10.0.0.1:1"),
            addr("10.0.0.2:2"),
            1460,
            true,
        )));
        t.sent(b"hello");
    }
    let data = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let mut reader = PcapNgReader::new(&data[..]).unwrap();
    let mut n = 0;
    while let Some(b) = reader.next_block() {
        if matches!(b.unwrap(), Block::EnhancedPacket(_)) {
            n += 1;
        }
    }
    // SYN, SYN-ACK, ACK, data, FIN, ACK of the FIN.
    assert_eq!(n, 6);
    assert!(format!("{tap:?}").contains("tap-unit"));
}

/// Packets read back from a pcapng file: (sections, enhanced packet blocks). Every block
/// must parse to the end of the file.
fn sections_and_packets(data: &[u8]) -> (usize, usize) {
    let mut reader = PcapNgReader::new(data).unwrap();
    let (mut sections, mut packets) = (1, 0);
    while let Some(b) = reader.next_block() {
        match b.expect("every block parses") {
            Block::SectionHeader(_) => sections += 1,
            Block::EnhancedPacket(p) => {
                assert_eq!(p.interface_id, 0, "the tap's one interface");
                packets += 1;
            }
            _ => {}
        }
    }
    (sections, packets)
}

/// A second tap appending to a file another tap still writes (a daemon and its
/// successor) adds a section; the blocks of both stay whole, whatever their order.
#[test]
fn a_tap_appending_to_a_file_another_writes_keeps_every_block_whole() {
    let path = std::env::temp_dir().join(format!("tap-append-{}.pcapng", std::process::id()));
    let first = CaptureTap::create(&path).unwrap();
    let mut a = Tap(Some(ConnTap::open(
        first,
        addr("10.0.0.1:1"),
        addr("10.0.0.2:2"),
        1460,
        true,
    )));
    a.sent(b"before the second tap");
    let second = CaptureTap::append(&path).unwrap();
    let mut b = Tap(Some(ConnTap::open(
        second,
        addr("10.0.0.1:3"),
        addr("10.0.0.2:4"),
        1460,
        true,
    )));
    // Interleaved: the first tap writes after the second one's section header.
    for i in 0..50 {
        a.sent(&[i; 700]);
        b.received(&[i; 900]);
    }
    drop((a, b));
    let data = std::fs::read(&path).unwrap();
    // Three packets of handshake, 51 and 50 of data, the FIN and its ACK: per connection.
    assert_eq!(
        sections_and_packets(&data),
        (2, (3 + 51 + 2) + (3 + 50 + 2))
    );
    // Created again, the file starts over.
    drop(CaptureTap::create(&path).unwrap());
    let data = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(sections_and_packets(&data), (1, 0));
}
