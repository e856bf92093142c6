//! The traffic of one case: two engines over loopback, each with its own capture tap, and
//! every RDMAP opcode on the wire, ending with a Terminate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use mpa::MpaConfig;
use offload_engine::tpt::Base;
use offload_engine::{CaptureTap, Cq, Engine, EngineConfig, QpEnd, QpInit, Wc};
use rdmap::{
    Access, FastReg, Payload, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus,
};

const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC);
/// The longest one completion or close may take.
const WAIT: Duration = Duration::from_secs(20);

/// RDMAP opcodes (RFC 5040 §4.3, RFC 7306 §8).
pub(crate) mod op {
    pub(crate) const WRITE: u8 = 0x0;
    pub(crate) const READ_REQ: u8 = 0x1;
    pub(crate) const READ_RESP: u8 = 0x2;
    pub(crate) const SEND: u8 = 0x3;
    pub(crate) const SEND_INV: u8 = 0x4;
    pub(crate) const SEND_SE: u8 = 0x5;
    pub(crate) const SEND_SE_INV: u8 = 0x6;
    pub(crate) const TERMINATE: u8 = 0x7;
    pub(crate) const IMMEDIATE: u8 = 0x8;
    pub(crate) const IMMEDIATE_SE: u8 = 0x9;
    pub(crate) const ATOMIC_REQ: u8 = 0xa;
    pub(crate) const ATOMIC_RESP: u8 = 0xb;
    /// This stack's Send with Immediate Data extension (both engines agree to it).
    pub(crate) const SEND_IMM: u8 = 0xc;
    pub(crate) const SEND_SE_INV_IMM: u8 = 0xf;
}

/// The opcodes the initiator sends after any RTR, in order, with runs of one opcode
/// collapsed (the 100 000-octet Write takes as many FPDUs as the MULPDU requires).
pub(crate) const INITIATOR_OPS: [u8; 12] = [
    op::SEND,
    op::SEND_INV,
    op::SEND_SE,
    op::SEND_SE_INV,
    op::WRITE, // 3000 octets, then 100 000 octets
    op::READ_REQ,
    op::IMMEDIATE,
    op::IMMEDIATE_SE,
    op::SEND_IMM,
    op::SEND_SE_INV_IMM,
    op::ATOMIC_REQ, // FetchAdd, then CmpSwap
    op::WRITE,      // to a bad STag: answered with a Terminate
];
/// Octets of the large Write: several FPDUs of the largest size.
pub(crate) const BIG_WRITE: usize = 100_000;
/// The opcodes the responder sends after any RTR answer, in order.
pub(crate) const RESPONDER_OPS: [u8; 3] = [
    op::READ_RESP,
    op::ATOMIC_RESP, // two of them
    op::TERMINATE,
];

/// What was captured, and where.
#[derive(Debug)]
pub(crate) struct Captures {
    /// The initiator engine's view.
    pub(crate) initiator: PathBuf,
    /// The responder engine's view.
    pub(crate) responder: PathBuf,
    /// The responder's TCP port.
    pub(crate) responder_port: u16,
}

async fn next(cq: &Cq) -> Wc {
    tokio::time::timeout(WAIT, cq.next())
        .await
        .expect("a completion in time")
        .expect("the CQ works")
}

fn engine(mpa: MpaConfig, pcap: &Path) -> Engine {
    let mut cfg = EngineConfig::default();
    cfg.mpa = mpa;
    cfg.pcap = Some(CaptureTap::create(pcap).expect("capture file"));
    Engine::new(cfg)
}

fn send(wr_id: u64, op: SendOp, flags: SendFlags) -> SendWr {
    SendWr {
        wr_id,
        op,
        flags: flags | SendFlags::SIGNALED,
    }
}

fn msg(data: &'static [u8], invalidate: Option<STag>) -> SendOp {
    msg_imm(data, invalidate, None)
}

fn msg_imm(data: &'static [u8], invalidate: Option<STag>, immediate: Option<u32>) -> SendOp {
    SendOp::Send {
        data: Payload::Bytes(Bytes::from_static(data)),
        invalidate,
        immediate,
    }
}

/// Runs the case's traffic with `ci` (initiator) and `cr` (responder) MPA settings and
/// captures both views into `dir/{name}.initiator.pcapng` and `.responder.pcapng`.
pub(crate) async fn run(name: &str, ci: MpaConfig, cr: MpaConfig, dir: &Path) -> Captures {
    let initiator = dir.join(format!("{name}.initiator.pcapng"));
    let responder = dir.join(format!("{name}.responder.pcapng"));
    let (server, client) = (engine(cr, &responder), engine(ci, &initiator));
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let responder_port = listener.local_addr().port();
    let (spd, scq) = (server.alloc_pd(), Cq::new(256));
    let stpt = server.tpt();
    let sbuf = stpt
        .register(spd, vec![0x11; 256 << 10], Base::ZeroBased, ALL)
        .unwrap();
    // Receives for the six Sends, the two Immediate Data messages (and an RTR Send).
    let mut init = QpInit::new(spd, &scq);
    init.recvs = (0..10)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sgl: [Sge {
                stag: sbuf,
                to: 4096 * i,
                len: 4096,
            }]
            .into(),
        })
        .collect();
    let accept = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        inc.accept(init, b"tshark responder").await.unwrap()
    });
    let (cpd, ccq) = (client.alloc_pd(), Cq::new(256));
    let cbuf = client
        .tpt()
        .register(cpd, vec![0x22; 64 << 10], Base::ZeroBased, ALL)
        .unwrap();
    let (cqp, _) = client
        .connect(
            SocketAddr::from(([127, 0, 0, 1], responder_port)),
            QpInit::new(cpd, &ccq),
            b"tshark initiator",
        )
        .await
        .unwrap();
    let sqp = accept.await.unwrap();
    // Two fast-registered regions, so the Sends with Invalidate have something to invalidate.
    let mut inval = Vec::new();
    for i in 0..3u8 {
        let frmr = stpt.alloc_fast_reg(spd, 4096).unwrap();
        let stag = frmr.with_instance(frmr.instance().wrapping_add(1 + i));
        let reg = FastReg {
            stag,
            to: 0,
            len: 4096,
            access: ALL,
        };
        sqp.post_send(send(
            90 + u64::from(i),
            SendOp::FastRegister(reg),
            SendFlags::NONE,
        ))
        .unwrap();
        assert_eq!(next(&scq).await.wc.status, WcStatus::Success);
        inval.push(stag);
    }
    let remote = |to: u64, len: u32| RemoteBuf {
        stag: sbuf,
        to: 0x8000 + to,
        len,
    };
    let local = |to: u64, len: u32| Sge {
        stag: cbuf,
        to,
        len,
    };
    // 3000 octets of Write and 2000 of Read: FPDUs that cross marker positions; then a
    // Write of several full-size FPDUs (larger than the loopback MSS).
    let ops = [
        send(1, msg(b"send", None), SendFlags::NONE),
        send(
            2,
            msg(b"send with invalidate", Some(inval[0])),
            SendFlags::NONE,
        ),
        send(
            3,
            msg(b"send with solicited event", None),
            SendFlags::SOLICITED,
        ),
        send(
            4,
            msg(b"send with se and inv", Some(inval[1])),
            SendFlags::SOLICITED,
        ),
        send(
            5,
            SendOp::Write {
                data: Payload::Bytes(Bytes::from(vec![0x5a; 3000])),
                dst: remote(0, 3000),
            },
            SendFlags::NONE,
        ),
        send(
            12,
            SendOp::Write {
                data: Payload::Bytes(Bytes::from(vec![0x3c; BIG_WRITE])),
                dst: remote(0x10000, BIG_WRITE as u32),
            },
            SendFlags::NONE,
        ),
        send(
            6,
            SendOp::Read {
                src: remote(0, 2000),
                dst: local(0, 2000),
            },
            SendFlags::NONE,
        ),
        send(7, SendOp::Immediate { data: 0x1122_3344 }, SendFlags::NONE),
        send(8, SendOp::Immediate { data: 0x5566 }, SendFlags::SOLICITED),
        send(
            13,
            msg_imm(b"send with imm", None, Some(0x0102_0304)),
            SendFlags::NONE,
        ),
        send(
            14,
            msg_imm(b"send with se, inv and imm", Some(inval[2]), Some(u32::MAX)),
            SendFlags::SOLICITED,
        ),
        send(
            9,
            SendOp::FetchAdd {
                dst: remote(0x1000, 8),
                add: 5,
                mask: 0,
                result: local(0x1000, 8),
            },
            SendFlags::NONE,
        ),
        send(
            10,
            SendOp::CmpSwap {
                dst: remote(0x1008, 8),
                compare: 0x1111_1111_1111_1111,
                compare_mask: u64::MAX,
                swap: 7,
                swap_mask: u64::MAX,
                result: local(0x1008, 8),
            },
            SendFlags::NONE,
        ),
    ];
    // One at a time, so each FPDU is written on its own and the order is fixed.
    for wr in ops {
        let id = wr.wr_id;
        cqp.post_send(wr).unwrap();
        let wc = next(&ccq).await;
        assert_eq!(
            (wc.wc.wr_id, wc.wc.status),
            (id, WcStatus::Success),
            "{wc:?}"
        );
    }
    // A Write to a stale STag: the responder answers with a Terminate and both end.
    let bad = STag::new(sbuf.index(), sbuf.instance().wrapping_add(1));
    cqp.post_send(send(
        11,
        SendOp::Write {
            data: Payload::Bytes(Bytes::from_static(b"nope")),
            dst: RemoteBuf {
                stag: bad,
                to: 0,
                len: 4,
            },
        },
        SendFlags::NONE,
    ))
    .unwrap();
    let (s_end, c_end) =
        tokio::time::timeout(WAIT, async { (sqp.closed().await, cqp.closed().await) })
            .await
            .expect("both ends close in time");
    assert!(matches!(s_end, QpEnd::Terminated(_)), "{s_end:?}");
    assert!(matches!(c_end, QpEnd::TerminatedByPeer(_)), "{c_end:?}");
    Captures {
        initiator,
        responder,
        responder_port,
    }
}
