//! The hostile-peer suite: an independent peer (`tests::hostile`, which lays out every
//! octet itself) against an engine in both roles. Each case connects afresh, completes the
//! MPA exchange by hand, sends something wrong, and asserts: the exact Terminate (layer,
//! type, code and which headers are copied, with the copied DDP header equal to the
//! offending one); the engine's registered memory unchanged; the engine still accepting;
//! and an honest queue pair of the same engine still moving verified data. Handshake abuse
//! (garbage, wrong key, PD_Length 513 and 65535, truncated, idle, Rev 3, an FPDU before
//! the Reply, markers asked and not sent, a wrong FPDUPTR, peer-to-peer without the RTR)
//! must end in a closed connection or the exact MPA Terminate, with the service alive.
//!
//! 101 cases in all (43 after the handshake in each role, 15 of handshake, markers and
//! negotiation abuse). One line per case goes to stderr (`--nocapture`).

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpInit, Srq};
use rdmap::{Access, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus};
use tests::hostile::{
    self, ANSWER, Peer, REP_KEY, REQ_KEY, fetch_add, mpa_frame, op, plain_request, qn,
    read_request, tagged, untagged,
};
use tokio::runtime::Runtime;

const LEN: usize = 4096;
/// Receives each target queue pair has posted (64 octets each).
const RECVS: u32 = 2;
const RECV_LEN: u32 = 64;
const RW: Access = Access::REMOTE_READ
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::LOCAL_READ)
    .union(Access::LOCAL_WRITE);
const LOCAL: Access = Access::LOCAL_READ.union(Access::LOCAL_WRITE);

/// The engine under attack and what it has registered.
struct Target {
    rt: Runtime,
    engine: Engine,
    pd: PdId,
    /// All remote rights, 4 KiB, zero-based.
    rw: STag,
    /// Remote read only.
    ro: STag,
    /// Remote write only.
    wo: STag,
    /// All rights, but in another protection domain (`pd2`).
    other: STag,
    pd2: PdId,
    /// Where the receives land (not checked: valid Sends may fill it).
    inbox: STag,
    addr: SocketAddr,
    cq: Cq,
    honest: Honest,
    cases: AtomicUsize,
}

/// An honest client of the target and its region on the target.
struct Honest {
    qp: Qp,
    cq: Cq,
    region: RemoteBuf,
    local: STag,
    pd: PdId,
    engine: Engine,
}

fn recv(i: u32, inbox: STag) -> RecvWr {
    RecvWr {
        wr_id: u64::from(i),
        sgl: Sge {
            stag: inbox,
            to: u64::from(i * RECV_LEN),
            len: RECV_LEN,
        }
        .into(),
    }
}

impl Target {
    fn new(cfg: EngineConfig) -> Arc<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let engine = Engine::new(cfg);
        let pd = engine.alloc_pd();
        let pd2 = engine.alloc_pd();
        let tpt = engine.tpt();
        let fill = |n: u8| {
            (0..LEN)
                .map(|i| (i as u8).wrapping_mul(n))
                .collect::<Vec<_>>()
        };
        let rw = tpt.register(pd, fill(3), Base::ZeroBased, RW).unwrap();
        let ro = tpt
            .register(pd, fill(5), Base::ZeroBased, Access::REMOTE_READ | LOCAL)
            .unwrap();
        let wo = tpt
            .register(pd, fill(7), Base::ZeroBased, Access::REMOTE_WRITE | LOCAL)
            .unwrap();
        let other = tpt.register(pd2, fill(9), Base::ZeroBased, RW).unwrap();
        let inbox = tpt
            .register(pd, vec![0; LEN], Base::ZeroBased, LOCAL)
            .unwrap();
        let honest_region = tpt.register(pd, vec![0; LEN], Base::ZeroBased, RW).unwrap();
        let cq = Cq::new(1 << 16);
        let (addr, honest) = rt.block_on(async {
            let listener = engine
                .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .unwrap();
            let addr = listener.local_addr();
            let cq2 = cq.clone();
            tokio::spawn(async move {
                // Every connection: two receives posted before the Reply, then accept.
                while let Ok(inc) = listener.accept().await {
                    let srq = Srq::new();
                    (0..RECVS).for_each(|i| srq.post_recv(recv(i, inbox)));
                    let init = QpInit {
                        srq: Some(srq),
                        ..QpInit::new(pd, &cq2)
                    };
                    let _ = inc.accept(init, b"").await;
                }
            });
            let client = Engine::new(EngineConfig::default());
            let cpd = client.alloc_pd();
            let hcq = Cq::new(64);
            let (qp, _) = client
                .connect(addr, QpInit::new(cpd, &hcq), b"")
                .await
                .expect("the honest client connects");
            let local = client
                .tpt()
                .register(cpd, vec![0; LEN], Base::ZeroBased, LOCAL)
                .unwrap();
            let honest = Honest {
                qp,
                cq: hcq,
                region: RemoteBuf {
                    stag: honest_region,
                    to: 0,
                    len: LEN as u32,
                },
                local,
                pd: cpd,
                engine: client,
            };
            (addr, honest)
        });
        Arc::new(Self {
            rt,
            engine,
            pd,
            rw,
            ro,
            wo,
            other,
            pd2,
            inbox,
            addr,
            cq,
            honest,
            cases: AtomicUsize::new(0),
        })
    }

    /// Checksums of the regions a hostile peer must never change.
    fn memory(&self) -> Vec<Vec<u8>> {
        let tpt = self.engine.tpt();
        [
            (self.pd, self.rw),
            (self.pd, self.ro),
            (self.pd, self.wo),
            (self.pd2, self.other),
        ]
        .into_iter()
        .map(|(pd, stag)| {
            let mut v = vec![0; LEN];
            tpt.read(pd, stag, 0, &mut v).unwrap();
            v
        })
        .collect()
    }

    /// The honest queue pair Writes a fresh pattern and Reads it back.
    fn honest_round_trip(&self, round: usize) {
        let h = &self.honest;
        self.rt.block_on(async {
            let data: Vec<u8> = (0..256).map(|i| (i + round) as u8).collect();
            h.qp.post_send(SendWr {
                wr_id: 1,
                op: SendOp::Write {
                    data: Payload::Bytes(Bytes::from(data.clone())),
                    dst: h.region.slice(0, 256),
                },
                flags: SendFlags::SIGNALED,
            })
            .unwrap();
            h.qp.post_send(SendWr {
                wr_id: 2,
                op: SendOp::Read {
                    src: h.region.slice(0, 256),
                    dst: Sge {
                        stag: h.local,
                        to: 0,
                        len: 256,
                    },
                },
                flags: SendFlags::SIGNALED,
            })
            .unwrap();
            for _ in 0..2 {
                let wc = tokio::time::timeout(ANSWER, h.cq.next())
                    .await
                    .expect("the honest queue pair answers")
                    .unwrap();
                assert_eq!(wc.wc.status, WcStatus::Success, "honest: {wc:?}");
            }
            let mut back = vec![0; 256];
            h.engine.tpt().read(h.pd, h.local, 0, &mut back).unwrap();
            assert_eq!(back, data, "the honest queue pair read back what it wrote");
        });
    }
}

/// What the target's regions look like to a case.
#[derive(Copy, Clone)]
struct Ctx {
    rw: u32,
    ro: u32,
    wo: u32,
    other: u32,
}

/// What a case expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// This Terminate: control octets 0 and 1, and octet 2 (M, D, R).
    Term([u8; 2], u8),
    /// The connection closed without a Terminate (handshake abuse).
    Closed,
}

/// A case after the handshake: the ULPDUs to send (or raw octets), and the verdict.
struct Case {
    name: &'static str,
    send: fn(&Ctx) -> Vec<Vec<u8>>,
    /// Post-process the FPDU octets of the last ULPDU (corrupt a CRC, say).
    raw: Option<fn(&mut Vec<u8>)>,
    expect: Expect,
}

const C0: u8 = 0xc0;
const E0: u8 = 0xe0;

fn send_msg(msn: u32, len: usize) -> Vec<u8> {
    untagged(op::SEND, qn::SEND, msn, 0, 0, &vec![0x33; len])
}

fn write(stag: u32, to: u64, len: usize) -> Vec<u8> {
    tagged(op::WRITE, true, stag, to, &vec![0xee; len])
}

fn rreq(msn: u32, src: u32, to: u64, len: u32) -> Vec<u8> {
    untagged(
        op::READ_REQUEST,
        qn::READ,
        msn,
        0,
        0,
        &read_request(0x0bad_0001, 0, len, src, to),
    )
}

fn atomic(msn: u32, stag: u32, to: u64) -> Vec<u8> {
    untagged(
        op::ATOMIC_REQUEST,
        qn::READ,
        msn,
        0,
        0,
        &fetch_add(9, stag, to, 1),
    )
}

fn cases() -> Vec<Case> {
    let t = |name, send: fn(&Ctx) -> Vec<Vec<u8>>, code: [u8; 2], hdrct| Case {
        name,
        send,
        raw: None,
        expect: Expect::Term(code, hdrct),
    };
    vec![
        // DDP tagged (RFC 5041 §7.2).
        t(
            "write to an unknown STag",
            |_| vec![write(0x00ee_ee00, 0, 8)],
            [0x11, 0x00],
            C0,
        ),
        t(
            "write with a stale STag instance",
            |c| vec![write(c.rw ^ 0x01, 0, 8)],
            [0x11, 0x00],
            C0,
        ),
        t(
            "write one octet past the end",
            |c| vec![write(c.rw, LEN as u64 - 7, 8)],
            [0x11, 0x01],
            C0,
        ),
        t(
            "write far past the end",
            |c| vec![write(c.rw, 1 << 40, 8)],
            [0x11, 0x01],
            C0,
        ),
        t(
            "write whose TO wraps 2^64",
            |c| vec![write(c.rw, u64::MAX - 3, 8)],
            [0x11, 0x03],
            C0,
        ),
        t(
            "write into another PD",
            |c| vec![write(c.other, 0, 8)],
            [0x11, 0x02],
            C0,
        ),
        t(
            "write to read-only memory",
            |c| vec![write(c.ro, 0, 8)],
            [0x01, 0x02],
            C0,
        ),
        t(
            "tagged DDP version 2",
            |c| {
                let mut w = write(c.rw, 0, 8);
                w[0] = 0xc2;
                vec![w]
            },
            [0x11, 0x04],
            C0,
        ),
        t(
            "tagged DDP version 0",
            |c| {
                let mut w = write(c.rw, 0, 8);
                w[0] = 0xc0;
                vec![w]
            },
            [0x11, 0x04],
            C0,
        ),
        // DDP untagged.
        t(
            "untagged DDP version 2",
            |_| {
                let mut s = send_msg(1, 8);
                s[0] = 0x42;
                vec![s]
            },
            [0x12, 0x06],
            C0,
        ),
        t(
            "send on queue number 4",
            |_| vec![untagged(op::SEND, 4, 1, 0, 0, b"x")],
            [0x12, 0x01],
            C0,
        ),
        t(
            "send on queue number 0xffffffff",
            |_| vec![untagged(op::SEND, u32::MAX, 1, 0, 0, b"x")],
            [0x12, 0x01],
            C0,
        ),
        t(
            "send with an MSN gap",
            |_| vec![send_msg(5, 8)],
            [0x12, 0x03],
            C0,
        ),
        t(
            "send with MSN 0",
            |_| vec![send_msg(0, 8)],
            [0x12, 0x03],
            C0,
        ),
        t(
            "send credit overrun (three into two receives)",
            |_| (1..=3).map(|m| send_msg(m, 8)).collect(),
            [0x12, 0x02],
            C0,
        ),
        t(
            "send longer than the receive",
            |_| vec![send_msg(1, RECV_LEN as usize + 1)],
            [0x12, 0x05],
            C0,
        ),
        t(
            "send segment with MO beyond the receive",
            |_| vec![untagged(op::SEND, qn::SEND, 1, 100, 0, b"late")],
            [0x12, 0x04],
            C0,
        ),
        // RDMAP (RFC 5040 §7.2, RFC 7306 §8.2).
        t(
            "RDMAP version 2",
            |_| {
                let mut s = send_msg(1, 8);
                s[1] = 0x83;
                vec![s]
            },
            [0x02, 0x05],
            C0,
        ),
        t(
            "RDMAP version 0",
            |_| {
                let mut s = send_msg(1, 8);
                s[1] = 0x03;
                vec![s]
            },
            [0x02, 0x05],
            C0,
        ),
        t(
            "opcode 0xC",
            |_| vec![untagged(0xc, qn::SEND, 1, 0, 0, b"x")],
            [0x02, 0x06],
            C0,
        ),
        t(
            "opcode 0xD",
            |_| vec![untagged(0xd, qn::SEND, 1, 0, 0, b"x")],
            [0x02, 0x06],
            C0,
        ),
        t(
            "opcode 0xE",
            |_| vec![untagged(0xe, qn::SEND, 1, 0, 0, b"x")],
            [0x02, 0x06],
            C0,
        ),
        t(
            "opcode 0xF",
            |_| vec![untagged(0xf, qn::SEND, 1, 0, 0, b"x")],
            [0x02, 0x06],
            C0,
        ),
        t(
            "read request for an unknown source",
            |_| vec![rreq(1, 0xdead_be00, 0, 16)],
            [0x01, 0x00],
            E0,
        ),
        t(
            "read request past the source end",
            |c| vec![rreq(1, c.rw, LEN as u64 - 8, 16)],
            [0x01, 0x01],
            E0,
        ),
        t(
            "read request of write-only memory",
            |c| vec![rreq(1, c.wo, 0, 16)],
            [0x01, 0x02],
            E0,
        ),
        t(
            "read request of another PD",
            |c| vec![rreq(1, c.other, 0, 16)],
            [0x01, 0x03],
            E0,
        ),
        t(
            "read request whose source TO wraps 2^64",
            |c| vec![rreq(1, c.rw, u64::MAX - 7, 16)],
            [0x01, 0x04],
            E0,
        ),
        t(
            "read request burst beyond the IRD",
            |c| (1..=400).map(|m| rreq(m, c.rw, 0, LEN as u32)).collect(),
            [0x02, 0x07],
            C0,
        ),
        t(
            "atomic at a misaligned TO",
            |c| vec![atomic(1, c.rw, 4)],
            [0x02, 0x07],
            C0,
        ),
        // The Terminate's RDMA header field holds a Read Request header only (28 octets,
        // RFC 5040 §4.8); a 52-octet Atomic Request header is not copied (R clear).
        t(
            "atomic on an unknown STag",
            |_| vec![atomic(1, 0x00ab_cd00, 0)],
            [0x01, 0x00],
            C0,
        ),
        t(
            "atomic without the atomic right",
            |c| vec![atomic(1, c.ro, 0)],
            [0x01, 0x02],
            C0,
        ),
        t(
            "atomic past the end",
            |c| vec![atomic(1, c.rw, LEN as u64)],
            [0x01, 0x01],
            C0,
        ),
        t(
            "immediate data of 7 octets",
            |_| vec![untagged(op::IMMEDIATE, qn::SEND, 1, 0, 0, &[1; 7])],
            [0x02, 0xff],
            C0,
        ),
        t(
            "immediate data of 9 octets",
            |_| vec![untagged(op::IMMEDIATE, qn::SEND, 1, 0, 0, &[1; 9])],
            [0x02, 0xff],
            C0,
        ),
        t(
            "send with invalidate of another PD's STag",
            |c| vec![untagged(op::SEND_INV, qn::SEND, 1, 0, c.other, b"x")],
            [0x01, 0x09],
            C0,
        ),
        t(
            "a ULPDU of zero octets",
            |_| vec![Vec::new()],
            [0x10, 0x00],
            0,
        ),
        t(
            "a ULPDU of 13 octets",
            |c| vec![write(c.rw, 0, 0)[..13].to_vec()],
            [0x10, 0x00],
            0,
        ),
        t(
            "zero-length write to garbage is fine, then a bad one",
            |c| {
                vec![
                    tagged(op::WRITE, true, 0x0bad_0000, u64::MAX, b""),
                    write(c.ro, 0, 8),
                ]
            },
            [0x01, 0x02],
            C0,
        ),
        // MPA (RFC 5044 §8).
        Case {
            name: "a bad CRC",
            send: |_| vec![send_msg(1, 8)],
            raw: Some(|f| {
                let n = f.len();
                f[n - 1] ^= 0x01;
            }),
            expect: Expect::Term([0x20, 0x02], 0),
        },
        Case {
            name: "one payload bit flipped under the CRC",
            send: |_| vec![send_msg(1, 8)],
            raw: Some(|f| f[22] ^= 0x10),
            expect: Expect::Term([0x20, 0x02], 0),
        },
        Case {
            name: "one DDP header bit flipped under the CRC",
            send: |_| vec![send_msg(1, 8)],
            raw: Some(|f| f[13] ^= 0x01),
            expect: Expect::Term([0x20, 0x02], 0),
        },
        Case {
            name: "the ULPDU_Length off by four under the CRC",
            send: |_| vec![send_msg(1, 8)],
            raw: Some(|f| f[1] -= 4),
            expect: Expect::Term([0x20, 0x02], 0),
        },
    ]
}

/// Sends `case` over `peer` and checks the verdict, memory, honest neighbour.
fn run_case(t: &Target, role: &str, case: &Case, mut peer: Peer) {
    let before = t.memory();
    let ctx = Ctx {
        rw: t.rw.to_u32(),
        ro: t.ro.to_u32(),
        wo: t.wo.to_u32(),
        other: t.other.to_u32(),
    };
    let ulpdus = (case.send)(&ctx);
    let mut wire = Vec::new();
    let n = ulpdus.len();
    for (i, u) in ulpdus.iter().enumerate() {
        let mut f = hostile::fpdu(u, peer.crc);
        if i + 1 == n
            && let Some(raw) = case.raw
        {
            raw(&mut f);
        }
        wire.extend(f);
    }
    peer.send_raw(&wire);
    let got = match peer.read_terminate().expect("reading the answer") {
        Some(term) => {
            if term.hdrct & 0x40 != 0 {
                // The copied DDP header is the offending segment's (its first 14 or 18
                // octets, after the 2-octet segment length).
                let hdr = &term.ddp[2..];
                assert!(
                    ulpdus.iter().any(|u| u.starts_with(hdr)),
                    "{role}: {}: copied DDP header {hdr:02x?} is not one we sent",
                    case.name
                );
            }
            if term.hdrct & 0x20 != 0 {
                // The copied RDMA header is the offending Read Request's 28 octets.
                assert!(
                    ulpdus
                        .iter()
                        .any(|u| u.len() >= 46 && u[18..46] == term.rdma[..]),
                    "{role}: {}: copied RDMA header {:02x?} is not one we sent",
                    case.name,
                    term.rdma
                );
            }
            Expect::Term(term.code, term.hdrct)
        }
        None => Expect::Closed,
    };
    assert_eq!(got, case.expect, "{role}: {}", case.name);
    assert!(peer.closed(), "{role}: {}: the connection ends", case.name);
    assert!(
        t.memory() == before,
        "{role}: {}: memory changed",
        case.name
    );
    let i = t.cases.fetch_add(1, Ordering::Relaxed);
    t.honest_round_trip(i);
    eprintln!("hostile {role:9} {:50} -> {got:?}", case.name);
}

/// The target as Responder: the peer connects and sends the Request.
fn as_responder(t: &Target, case: &Case) {
    let mut sock = StdStream::connect(t.addr).unwrap();
    use std::io::Write;
    sock.write_all(&plain_request(b"")).unwrap();
    let mut peer = Peer::new(sock, true);
    let rep = peer.read_frame().unwrap().expect("a Reply");
    assert_eq!(&rep.key, REP_KEY);
    assert_eq!(rep.flags & 0x20, 0, "accepted");
    run_case(t, "responder", case, peer);
}

/// The target as Initiator: it connects to the peer, which answers its Request by hand,
/// reads the target's first FPDU (a Send), then attacks.
fn as_initiator(t: &Arc<Target>, case: &Case) {
    let l = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let target = t.clone();
    let qp = t.rt.spawn(async move {
        let srq = Srq::new();
        (0..RECVS).for_each(|i| srq.post_recv(recv(i, target.inbox)));
        let init = QpInit {
            srq: Some(srq),
            ..QpInit::new(target.pd, &target.cq)
        };
        let (qp, _) = target
            .engine
            .connect(addr, init, b"")
            .await
            .expect("connect");
        qp.post_send(SendWr {
            wr_id: 0,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"hi")),
                invalidate: None,
                immediate: None,
            },
            flags: SendFlags::NONE,
        })
        .unwrap();
        qp
    });
    let (sock, _) = l.accept().unwrap();
    let mut peer = Peer::new(sock, true);
    let req = peer.read_frame().unwrap().expect("a Request");
    assert_eq!(&req.key, REQ_KEY);
    peer.send_raw(&mpa_frame(REP_KEY, 0x40, 2, Some((16, 16)), b"", None));
    let first = peer.read_ulpdu().unwrap().expect("the target's first FPDU");
    assert_eq!(&first[18..], b"hi");
    let _qp = t.rt.block_on(qp).unwrap();
    run_case(t, "initiator", case, peer);
}

#[test]
fn every_hostile_input_gets_the_exact_terminate_in_both_roles() {
    let t = Target::new(EngineConfig::default());
    for case in cases() {
        as_responder(&t, &case);
        as_initiator(&t, &case);
    }
    let n = t.cases.load(Ordering::Relaxed);
    eprintln!("hostile: {n} cases after the handshake, both roles");
    assert!(n >= 86);
}

/// Handshake abuse against the target as Responder: the raw octets sent on connect, and
/// what must follow.
struct Abuse {
    name: &'static str,
    bytes: fn() -> Vec<u8>,
    expect: Expect,
}

fn abuses() -> Vec<Abuse> {
    let closed = |name, bytes: fn() -> Vec<u8>| Abuse {
        name,
        bytes,
        expect: Expect::Closed,
    };
    vec![
        closed("garbage instead of a Request", || vec![0x5a; 40]),
        closed("a Reply key in a Request (Initiator/Initiator)", || {
            mpa_frame(REP_KEY, 0x40, 2, Some((16, 16)), b"", None)
        }),
        closed("a key with one octet wrong", || {
            let mut f = plain_request(b"");
            f[3] = b'!';
            f
        }),
        closed("PD_Length 513", || {
            let mut f = mpa_frame(REQ_KEY, 0x40, 1, None, &[0; 513], None);
            f.truncate(20 + 513);
            f
        }),
        closed("PD_Length 65535", || {
            mpa_frame(REQ_KEY, 0x40, 1, None, &[0; 600], Some(u16::MAX))
        }),
        closed("Rev 3", || mpa_frame(REQ_KEY, 0x40, 3, None, b"", None)),
        closed("Rev 0", || mpa_frame(REQ_KEY, 0xc0, 0, None, b"", None)),
        closed("a truncated Request, then silence", || {
            plain_request(b"hello")[..22].to_vec()
        }),
        closed("a connection that says nothing", Vec::new),
        closed("half a header, then silence", || REQ_KEY[..10].to_vec()),
    ]
}

#[test]
fn handshake_abuse_is_refused_and_the_service_carries_on() {
    let mut cfg = EngineConfig::default();
    // The Responder's wait for a Request (5 s by default), short for the test.
    cfg.mpa.timeout = Duration::from_secs(1);
    let t = Target::new(cfg);
    let mut n = 0;
    for a in abuses() {
        let before = t.memory();
        let mut sock = StdStream::connect(t.addr).unwrap();
        use std::io::Write;
        let _ = sock.write_all(&(a.bytes)());
        let mut peer = Peer::new(sock, true);
        // No Reply may come; the connection must close (at the latest after the timeout).
        let frame = peer.read_frame();
        let got = match frame {
            Ok(Some(f)) if f.flags & 0x20 != 0 => Expect::Closed, // an explicit reject
            Ok(Some(f)) => panic!("{}: the target accepted: {f:?}", a.name),
            Ok(None) | Err(_) => Expect::Closed,
        };
        assert_eq!(got, a.expect, "{}", a.name);
        assert!(t.memory() == before, "{}: memory changed", a.name);
        t.honest_round_trip(n);
        n += 1;
        eprintln!("hostile handshake {:50} -> {got:?}", a.name);
    }

    // After the Reply: an FPDU sent before the Reply is a violation (RFC 5044 §7.1.2);
    // peer-to-peer mode without the RTR gets MPA "no matching RTR".
    let mut sock = StdStream::connect(t.addr).unwrap();
    use std::io::Write;
    let mut early = plain_request(b"");
    early.extend(hostile::fpdu(&send_msg(1, 8), true));
    sock.write_all(&early).unwrap();
    let mut peer = Peer::new(sock, true);
    match peer.read_frame() {
        Ok(Some(f)) if f.flags & 0x20 == 0 => {
            let term = peer.read_terminate().unwrap();
            assert!(
                term.is_none() || term.as_ref().is_some_and(|t| t.code[0] == 0x20),
                "an FPDU before the Reply: {term:?}"
            );
        }
        _ => {}
    }
    assert!(
        peer.closed(),
        "an FPDU before the Reply ends the connection"
    );
    eprintln!(
        "hostile handshake {:50} -> Closed",
        "an FPDU before the Reply"
    );
    t.honest_round_trip(n);

    // A=1 (peer-to-peer) with Write and Read RTRs offered, then a Send instead of the RTR.
    let mut sock = StdStream::connect(t.addr).unwrap();
    let req = mpa_frame(
        REQ_KEY,
        0x40,
        2,
        Some((0x8000 | 16, 0x8000 | 0x4000 | 16)),
        b"",
        None,
    );
    sock.write_all(&req).unwrap();
    let mut peer = Peer::new(sock, true);
    let rep = peer.read_frame().unwrap().expect("a Reply");
    assert_eq!(rep.flags & 0x20, 0);
    peer.send(&send_msg(1, 8));
    let term = peer.read_terminate().unwrap().expect("a Terminate");
    assert_eq!(
        (term.code, term.hdrct),
        ([0x20, 0x07], 0),
        "p2p without the RTR"
    );
    assert!(peer.closed());
    eprintln!(
        "hostile handshake {:50} -> {:?}",
        "peer-to-peer without the RTR", term.code
    );
    t.honest_round_trip(n + 1);
}

/// Markers: the target asks for them (M=1 in its Reply). A peer that puts a wrong FPDUPTR
/// in one gets MPA code 3. A peer that leaves them out gets MPA code 2: the target takes
/// the first four octets for the marker, and the CRC, checked before the markers (the
/// deframer's documented order), no longer matches.
#[test]
fn markers_asked_and_not_sent_or_wrong_are_mpa_errors() {
    let mut cfg = EngineConfig::default();
    cfg.mpa.markers = true;
    let t = Target::new(cfg);
    for (name, marker, code) in [
        ("markers asked, none sent", None, [0x20, 0x02]),
        (
            "a marker with a wrong FPDUPTR",
            Some([0u8, 0, 0, 4]),
            [0x20, 0x03],
        ),
    ] {
        let before = t.memory();
        let mut sock = StdStream::connect(t.addr).unwrap();
        use std::io::Write;
        sock.write_all(&plain_request(b"")).unwrap();
        let mut peer = Peer::new(sock, true);
        let rep = peer.read_frame().unwrap().expect("a Reply");
        assert_eq!(rep.flags & 0x80, 0x80, "the target asks for markers");
        // The stream's first octet is a marker position: a marker (FPDUPTR 0 would be
        // right) goes first, then the FPDU; its CRC covers the marker (RFC 5044 §4.4).
        let f = send_msg(1, 8);
        let mut wire = marker.map(|m| m.to_vec()).unwrap_or_default();
        let mut body = (f.len() as u16).to_be_bytes().to_vec();
        body.extend(&f);
        while !body.len().is_multiple_of(4) {
            body.push(0);
        }
        let mut covered = wire.clone();
        covered.extend(&body);
        wire.extend(&body);
        wire.extend(crc32c::crc32c(&covered).to_le_bytes());
        peer.send_raw(&wire);
        // The target inserts no markers itself: our Request did not ask for them.
        let term = peer.read_terminate().unwrap().expect("a Terminate");
        assert_eq!((term.code, term.hdrct), (code, 0), "{name}");
        assert!(t.memory() == before, "{name}: memory changed");
        t.honest_round_trip(0);
        eprintln!("hostile handshake {name:50} -> {:?}", term.code);
    }
}

/// The target as Initiator, answered by a Reply whose ORD is above the target's IRD: the
/// target cannot take that many Reads and says so with MPA "insufficient IRD" (RFC 6581
/// §9.1), the one Terminate it sends before any FPDU of the peer.
#[test]
fn a_reply_asking_more_reads_than_the_ird_is_mpa_insufficient_ird() {
    let t = Target::new(EngineConfig::default());
    let l = StdListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let target = t.clone();
    let connect = t.rt.spawn(async move {
        let init = QpInit::new(target.pd, &target.cq);
        target.engine.connect(addr, init, b"").await.map(|_| ())
    });
    let (sock, _) = l.accept().unwrap();
    let mut peer = Peer::new(sock, true);
    let req = peer.read_frame().unwrap().expect("a Request");
    let (ird, _) = req.ird_ord().expect("an IRD/ORD block");
    peer.send_raw(&mpa_frame(REP_KEY, 0x40, 2, Some((16, ird + 1)), b"", None));
    let term = peer.read_terminate().unwrap().expect("a Terminate");
    assert_eq!((term.code, term.hdrct), ([0x20, 0x06], 0));
    assert!(peer.closed());
    let err =
        t.rt.block_on(connect)
            .unwrap()
            .expect_err("the connect fails");
    assert!(err.to_string().to_lowercase().contains("ird"), "{err}");
    t.honest_round_trip(0);
    eprintln!(
        "hostile initiator {:50} -> {:?}",
        "Reply ORD above the IRD", term.code
    );
}
