use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use rdmap::RecvWr;

use super::*;
use crate::control::{HEADER_LEN, Header, MAX_INITIAL_RECVS, QpChange, QueueDepths, Reply, func};

#[test]
fn a_request_is_header_then_fixed_little_endian_fields() {
    let m = Request::RegMr {
        pd: 3,
        access: 0x0f,
        va: Some(0x1122_3344_5566_7788),
        len: 4096,
        offset: 0x7f00_0000_1010,
    }
    .encode(0xa1a2_a3a4_a5a6_a7a8);
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x31, 0, 0, 0,  0x04, 0x00,  0x08, 0x00,
        0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,
        3, 0, 0, 0,  0x0f, 0, 0, 0,  1,
        0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
        0, 0x10, 0, 0, 0, 0, 0, 0,
        0x10, 0x10, 0, 0, 0, 0x7f, 0, 0,
    ];
    assert_eq!(&m[..], want);
    let h = Header::parse(&m).unwrap().unwrap();
    assert_eq!(
        (h.len, h.func, h.version, h.txn),
        (49, 4, 8, 0xa1a2_a3a4_a5a6_a7a8)
    );
    Request::decode(h.func, &m[HEADER_LEN..]).unwrap();
    assert_eq!(request_fds(h.func), 1);
}

#[test]
fn a_registration_at_a_reserved_stag_is_the_stag_then_the_region() {
    let m = Request::RegMrAt {
        stag: 0x0000_2a07,
        pd: 3,
        access: 0x0f,
        va: None,
        len: 4096,
        offset: 0,
    }
    .encode(1);
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x35, 0, 0, 0,  0x18, 0x00,  0x08, 0x00,
        1, 0, 0, 0, 0, 0, 0, 0,
        0x07, 0x2a, 0, 0,
        3, 0, 0, 0,  0x0f, 0, 0, 0,  0,
        0, 0, 0, 0, 0, 0, 0, 0,
        0, 0x10, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(&m[..], want);
    assert_eq!(request_fds(func::REG_MR_AT), 1);
    let r = Request::ReserveStag.encode(2);
    assert_eq!(&r[..8], &[16, 0, 0, 0, 0x17, 0x00, 0x08, 0x00]);
    assert_eq!(request_fds(func::RESERVE_STAG), 0);
    let reply = Reply::Id(0x2a07).encode(func::RESERVE_STAG, 2);
    let h = Header::parse(&reply).unwrap().unwrap();
    assert_eq!(
        Reply::decode(h.func & !func::REPLY, &reply[HEADER_LEN..]).unwrap(),
        Reply::Id(0x2a07)
    );
}

#[test]
fn connect_carries_address_and_private_data() {
    let m = Request::Connect {
        pd: 1,
        srq: 0x0203,
        depths: QueueDepths { sq: 0x400, rq: 16 },
        addr: "10.0.0.2:4791".parse().unwrap(),
        private: Bytes::from_static(b"hi"),
        recvs: Vec::new(),
        rtr: 2,
    }
    .encode(7);
    #[rustfmt::skip]
    let body: &[u8] = &[
        1, 0, 0, 0,
        3, 2, 0, 0,
        0, 4, 0, 0,
        16, 0, 0, 0,
        4, 0xb7, 0x12, 10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        2, 0, b'h', b'i',
        0, 0,
        2,
    ];
    assert_eq!(&m[HEADER_LEN..], body);
    assert!(matches!(
        Request::decode(func::CONNECT, body).unwrap(),
        Request::Connect {
            pd: 1,
            srq: 0x0203,
            depths: QueueDepths { sq: 0x400, rq: 16 },
            rtr: 2,
            ..
        }
    ));
}

/// One request of every kind.
fn every_request() -> Vec<Request> {
    let addr: SocketAddr = "[::1]:9".parse().unwrap();
    vec![
        Request::Open { pid: 42 },
        Request::AllocPd,
        Request::DeallocPd { pd: 2 },
        Request::RegMr {
            pd: 1,
            access: 3,
            va: None,
            len: 1 << 40,
            offset: 0,
        },
        Request::DeregMr { stag: 0x1234_5601 },
        Request::ReserveStag,
        Request::RegMrAt {
            stag: 0x1234_5601,
            pd: 1,
            access: 3,
            va: Some(1 << 40),
            len: 8,
            offset: 0,
        },
        Request::Listen { addr },
        Request::CloseListener { id: 5 },
        Request::Connect {
            pd: 1,
            srq: 0,
            depths: QueueDepths { sq: 256, rq: 256 },
            addr,
            private: Bytes::from(vec![9; 512]),
            recvs: vec![
                RecvWr {
                    wr_id: 1,
                    sgl: [rdmap::Sge {
                        stag: rdmap::STag::from_u32(0x101),
                        to: 0,
                        len: 64,
                    }]
                    .into(),
                };
                MAX_INITIAL_RECVS
            ],
            rtr: 6,
        },
        Request::Accept {
            incoming: 3,
            pd: 1,
            srq: 7,
            depths: QueueDepths { sq: 1, rq: 65536 },
            private: Bytes::new(),
            recvs: Vec::new(),
        },
        Request::Reject {
            incoming: 3,
            private: Bytes::from_static(b"no"),
        },
        Request::Disconnect { qp: 1 },
        Request::DestroyQp { qp: 1 },
        Request::QueryQp { qp: 1 },
        Request::ModifyQp {
            qp: 1,
            change: QpChange::IncomingRdma(false),
        },
        Request::ModifyQp {
            qp: 2,
            change: QpChange::DrainOnLocalFailure(true),
        },
        Request::ModifyQp {
            qp: 3,
            change: QpChange::ResumeSendQueue,
        },
        Request::Stats,
        Request::QueryDevice,
        Request::ServiceStats,
        Request::ListQps { after: 77 },
        Request::ShareTx { qp: 9 },
        Request::CreateSrq { depth: 100 },
        Request::DestroySrq { srq: 7 },
        Request::AllocMw { pd: 1, kind: 2 },
        Request::DeallocMw { stag: 0x201 },
        Request::BindMw {
            mw: 0x201,
            mr: 0x101,
            to: 1 << 40,
            len: 4096,
            access: 0x0f,
            one_touch: true,
        },
        Request::Invalidate { stag: 0x202 },
        Request::AllocFastRegMr {
            pd: 1,
            len: 1 << 20,
        },
    ]
}

#[test]
fn every_request_round_trips_and_truncations_fail() {
    for req in every_request() {
        let m = req.encode(1);
        let h = Header::parse(&m).unwrap().unwrap();
        assert_eq!(h.len as usize, m.len());
        let body = &m[HEADER_LEN..];
        assert_eq!(Request::decode(h.func, body).unwrap(), req);
        for cut in 0..body.len() {
            assert!(
                Request::decode(h.func, &body[..cut]).is_err(),
                "{req:?} cut {cut}"
            );
        }
        let mut long = body.to_vec();
        long.push(0);
        assert!(Request::decode(h.func, &long).is_err());
    }
    assert_eq!(
        Request::decode(0x7777, &[]),
        Err(Malformed("function code"))
    );
    // Private data beyond the MPA limit is refused.
    let mut m = BytesMut::new();
    m.put_u32_le(1);
    m.put_u32_le(1);
    m.put_u32_le(0);
    m.put_u16_le(513);
    m.put_slice(&[0; 513]);
    assert!(Request::decode(func::ACCEPT, &m).is_err());
}

#[test]
fn window_and_queue_requests_are_laid_out_as_documented() {
    let bind = Request::BindMw {
        mw: 0x0201,
        mr: 0x0101,
        to: 0x10,
        len: 0x20,
        access: 0x0c,
        one_touch: true,
    }
    .encode(9);
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x13, 0, 8, 0,
        9, 0, 0, 0, 0, 0, 0, 0,
        1, 2, 0, 0,  1, 1, 0, 0,
        0x10, 0, 0, 0, 0, 0, 0, 0,
        0x20, 0, 0, 0, 0, 0, 0, 0,
        0x0c, 0, 0, 0,  1,
    ];
    assert_eq!(&bind[4..], want);
    assert_eq!(request_fds(func::ALLOC_FAST_REG_MR), 1);
    assert!(
        Request::decode(func::ALLOC_MW, &[1, 0, 0, 0, 3]).is_err(),
        "type 3"
    );
    assert_eq!(
        &Request::CreateSrq { depth: 100 }.encode(9)[4..8],
        &[0x0f, 0, 8, 0],
        "function 0x000f, version 8"
    );
}
