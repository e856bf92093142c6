//! Memory protection across the wire with the real TPT: windows of both types, one-touch
//! windows, fast registration, invalidation (local and remote), shared receive queues and
//! solicited events, between two engines over loopback TCP.

use std::net::SocketAddr;

use bytes::Bytes;
use offload_engine::tpt::{Base, MwType, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpEnd, QpInit, Srq, Wc};
use rdmap::{
    Access, Bind, FastReg, Payload, QpState, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr,
    Sge, WcOpcode, WcStatus,
};

const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC)
    .union(Access::BIND);

struct Host {
    engine: Engine,
    pd: PdId,
    cq: Cq,
}

fn host() -> Host {
    let engine = Engine::new(EngineConfig::default());
    Host {
        pd: engine.alloc_pd(),
        engine,
        cq: Cq::new(4096),
    }
}

/// Connects `client` to `server`; returns (client qp, server qp).
async fn connect(client: &Host, server: &Host, srq: Option<Srq>) -> (Qp, Qp) {
    let listener = server
        .engine
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    let mut init = QpInit::new(server.pd, &server.cq);
    init.srq = srq;
    let accept = tokio::spawn(async move {
        listener
            .accept()
            .await
            .unwrap()
            .accept(init, b"")
            .await
            .unwrap()
    });
    let (c, _) = client
        .engine
        .connect(addr, QpInit::new(client.pd, &client.cq), b"")
        .await
        .unwrap();
    (c, accept.await.unwrap())
}

fn write(wr_id: u64, data: &[u8], dst: RemoteBuf) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            dst,
        },
        flags: SendFlags::SIGNALED,
    }
}

fn send(wr_id: u64, data: &[u8], invalidate: Option<STag>, flags: SendFlags) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            invalidate,
            immediate: None,
        },
        flags: flags | SendFlags::SIGNALED,
    }
}

async fn next(cq: &Cq) -> Wc {
    cq.next().await.expect("cq")
}

/// Writes `data` to `dst` and waits until a Read of it came back, proving placement.
async fn write_and_confirm(c: &Host, qp: &Qp, data: &[u8], dst: RemoteBuf) {
    qp.post_send(write(1, data, dst)).unwrap();
    assert!(next(&c.cq).await.wc.is_ok());
    let sink = c
        .engine
        .tpt()
        .register(c.pd, vec![0; data.len()], Base::ZeroBased, ALL)
        .unwrap();
    qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Read {
            src: dst.slice(0, data.len() as u32),
            dst: Sge {
                stag: sink,
                to: 0,
                len: data.len() as u32,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let wc = next(&c.cq).await;
    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
    let mut back = vec![0; data.len()];
    c.engine.tpt().read(c.pd, sink, 0, &mut back).unwrap();
    assert_eq!(back, data);
}

/// The server terminated `qp`'s peer with `wire`; nothing changed in `region`.
async fn expect_terminate(server_qp: &Qp, client_qp: &Qp, wire: [u8; 2]) {
    match server_qp.closed().await {
        QpEnd::Terminated(code) => assert_eq!(code.to_wire(), wire, "{code}"),
        other => panic!("server: {other:?}"),
    }
    assert!(matches!(client_qp.closed().await, QpEnd::TerminatedByPeer(c) if c.to_wire() == wire));
}

#[tokio::test]
async fn type1_window_exposes_only_its_range() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s, None).await;
    let tpt = s.engine.tpt();
    let mr = tpt
        .register(s.pd, vec![0; 4096], Base::Va(0x8000), ALL)
        .unwrap();
    let mw = tpt.alloc_mw(s.pd, MwType::One).unwrap();
    let win = tpt
        .bind_mw(
            mw,
            mr,
            0x8100,
            256,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
            false,
            None,
        )
        .unwrap();
    write_and_confirm(
        &c,
        &cqp,
        b"through the window",
        RemoteBuf {
            stag: win,
            to: 0x8100,
            len: 256,
        },
    )
    .await;
    let before = tpt.info(mr).unwrap();
    // One octet past the window's end: bounds, although the region continues.
    cqp.post_send(write(
        3,
        b"xx",
        RemoteBuf {
            stag: win,
            to: 0x8100 + 255,
            len: 2,
        },
    ))
    .unwrap();
    expect_terminate(&sqp, &cqp, [0x11, 0x01]).await;
    let mut mem = vec![0; 4096];
    tpt.read(s.pd, mr, 0x8000, &mut mem).unwrap();
    assert_eq!(&mem[0x100..0x100 + 18], b"through the window");
    assert!(
        mem[0x100 + 255..].iter().all(|&b| b == 0),
        "nothing past the window"
    );
    assert_eq!(before.len, 4096);
}

#[tokio::test]
async fn one_touch_window_serves_one_write() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s, None).await;
    let tpt = s.engine.tpt();
    let mr = tpt
        .register(s.pd, vec![0; 1 << 16], Base::ZeroBased, ALL)
        .unwrap();
    let mw = tpt.alloc_mw(s.pd, MwType::One).unwrap();
    let win = tpt
        .bind_mw(mw, mr, 0, 1 << 16, Access::REMOTE_WRITE, true, None)
        .unwrap();
    let dst = RemoteBuf {
        stag: win,
        to: 0,
        len: 1 << 16,
    };
    // A multi-segment Write: the window closes only after its last segment.
    cqp.post_send(write(1, &vec![7; 40_000], dst)).unwrap();
    assert!(next(&c.cq).await.wc.is_ok());
    cqp.post_send(write(2, b"again", dst)).unwrap();
    expect_terminate(&sqp, &cqp, [0x11, 0x00]).await;
    let mut mem = vec![0; 40_005];
    tpt.read(s.pd, mr, 0, &mut mem).unwrap();
    assert!(mem[..40_000].iter().all(|&b| b == 7));
    assert!(tpt.info(win).unwrap().touched);
}

#[tokio::test]
async fn type2_window_is_bound_by_a_work_request_to_one_qp() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s, None).await;
    let (cqp2, sqp2) = connect(&c, &s, None).await;
    let tpt = s.engine.tpt();
    let mr = tpt
        .register(s.pd, vec![0; 4096], Base::ZeroBased, ALL)
        .unwrap();
    let mw = tpt.alloc_mw(s.pd, MwType::Two).unwrap();
    let win = mw.with_instance(mw.instance().wrapping_add(1));
    sqp.post_send(SendWr {
        wr_id: 9,
        op: SendOp::Bind(Bind {
            mw: win,
            mr,
            to: 1024,
            len: 512,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ,
            one_touch: false,
        }),
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let wc = next(&s.cq).await;
    assert_eq!(
        (wc.wc.opcode, wc.wc.status),
        (WcOpcode::Bind, WcStatus::Success)
    );
    let dst = RemoteBuf {
        stag: win,
        to: 1024,
        len: 512,
    };
    write_and_confirm(&c, &cqp, b"bound to qp 1", dst).await;
    // The same window through the other connection: not associated with that stream.
    cqp2.post_send(write(4, b"intruder", dst)).unwrap();
    expect_terminate(&sqp2, &cqp2, [0x11, 0x02]).await;
    assert_eq!(sqp.state(), QpState::Rts, "the first connection carries on");
    // Send with Invalidate of the window from its own peer.
    sqp.post_recv(RecvWr {
        wr_id: 5,
        sgl: [Sge {
            stag: mr,
            to: 0,
            len: 64,
        }]
        .into(),
    })
    .unwrap();
    cqp.post_send(send(6, b"done", Some(win), SendFlags::NONE))
        .unwrap();
    let wc = loop {
        let wc = next(&s.cq).await;
        if wc.wc.wr_id == 5 {
            break wc;
        }
    };
    assert_eq!(wc.wc.invalidated, Some(win));
    assert!(!tpt.info(win).unwrap().valid);
}

#[tokio::test]
async fn fast_registration_and_remote_invalidate() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s, None).await;
    let tpt = s.engine.tpt();
    let frmr = tpt.alloc_fast_reg(s.pd, 8192).unwrap();
    let stag = frmr.with_instance(frmr.instance().wrapping_add(3));
    sqp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::FastRegister(FastReg {
            stag,
            to: 0x5000,
            len: 4096,
            access: ALL,
        }),
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert_eq!(next(&s.cq).await.wc.opcode, WcOpcode::FastRegister);
    let dst = RemoteBuf {
        stag,
        to: 0x5000,
        len: 4096,
    };
    write_and_confirm(&c, &cqp, b"fast", dst).await;
    // The peer invalidates it with its Send; a later Write to it is refused.
    let buf = tpt
        .register(s.pd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 2,
        sgl: [Sge {
            stag: buf,
            to: 0,
            len: 64,
        }]
        .into(),
    })
    .unwrap();
    cqp.post_send(send(3, b"", Some(stag), SendFlags::NONE))
        .unwrap();
    let wc = loop {
        let wc = next(&s.cq).await;
        if wc.wc.wr_id == 2 {
            break wc;
        }
    };
    assert_eq!(wc.wc.invalidated, Some(stag));
    cqp.post_send(write(4, b"late", dst)).unwrap();
    expect_terminate(&sqp, &cqp, [0x11, 0x00]).await;
}

#[tokio::test]
async fn ordinary_region_cannot_be_invalidated_remotely() {
    let (c, s) = (host(), host());
    let (cqp, sqp) = connect(&c, &s, None).await;
    let tpt = s.engine.tpt();
    let mr = tpt
        .register(s.pd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    sqp.post_recv(RecvWr {
        wr_id: 2,
        sgl: [Sge {
            stag: mr,
            to: 0,
            len: 64,
        }]
        .into(),
    })
    .unwrap();
    cqp.post_send(send(3, b"", Some(mr), SendFlags::NONE))
        .unwrap();
    expect_terminate(&sqp, &cqp, [0x02, 0x09]).await;
    assert!(tpt.info(mr).unwrap().valid);
}

#[tokio::test]
async fn shared_receive_queue_serves_several_qps_and_solicited_events_fire() {
    let (c, s) = (host(), host());
    let srq = Srq::new();
    let tpt = s.engine.tpt();
    let buf = tpt
        .register(s.pd, vec![0; 64 * 64], Base::ZeroBased, ALL)
        .unwrap();
    for i in 0..8u64 {
        srq.post_recv(RecvWr {
            wr_id: 100 + i,
            sgl: [Sge {
                stag: buf,
                to: i * 64,
                len: 64,
            }]
            .into(),
        });
    }
    let (a, _sa) = connect(&c, &s, Some(srq.clone())).await;
    let (b, _sb) = connect(&c, &s, Some(srq.clone())).await;
    s.cq.req_notify(true);
    a.post_send(send(1, b"unsolicited from a", None, SendFlags::NONE))
        .unwrap();
    b.post_send(send(2, b"unsolicited from b", None, SendFlags::NONE))
        .unwrap();
    for _ in 0..2 {
        let wc = next(&s.cq).await;
        assert!(wc.wc.wr_id >= 100 && !wc.wc.solicited);
    }
    a.post_send(send(3, b"wake up", None, SendFlags::SOLICITED))
        .unwrap();
    s.cq.notified().await;
    let wc = next(&s.cq).await;
    assert!(wc.wc.solicited);
    assert_eq!(wc.wc.byte_len, 7);
    assert_eq!(srq.len(), 5, "three receives taken from the shared queue");
}

#[tokio::test]
async fn zero_length_and_large_messages() {
    let (c, s) = (host(), host());
    let (cqp, _sqp) = connect(&c, &s, None).await;
    let len = 64 << 20;
    let mr = s
        .engine
        .tpt()
        .register(s.pd, vec![0; len], Base::ZeroBased, ALL)
        .unwrap();
    // A zero-length Write and Read with a bogus STag: nothing is checked, nothing happens.
    let bogus = RemoteBuf {
        stag: STag::from_u32(0xdead_be00),
        to: 7,
        len: 0,
    };
    cqp.post_send(write(1, b"", bogus)).unwrap();
    let sink = c
        .engine
        .tpt()
        .register(c.pd, vec![0; len], Base::ZeroBased, ALL)
        .unwrap();
    cqp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Read {
            src: bogus,
            dst: Sge {
                stag: sink,
                to: 0,
                len: 0,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert!(next(&c.cq).await.wc.is_ok());
    assert!(next(&c.cq).await.wc.is_ok());
    // One 64 MiB message each way.
    let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    write_and_confirm(
        &c,
        &cqp,
        &data,
        RemoteBuf {
            stag: mr,
            to: 0,
            len: len as u32,
        },
    )
    .await;
}

/// One protection failure per case, each on its own connection while a neighbour
/// connection between the same engines keeps working: the exact Terminate, the target
/// memory unchanged, receives flushed.
#[tokio::test]
async fn every_protection_failure_terminates_only_its_own_qp() {
    let (c, s) = (host(), host());
    let tpt = s.engine.tpt();
    let other_pd = s.engine.alloc_pd();
    let target = tpt
        .register(s.pd, vec![0x5a; 4096], Base::Va(0x1_0000), ALL)
        .unwrap();
    let foreign = tpt
        .register(other_pd, vec![0x5a; 4096], Base::ZeroBased, ALL)
        .unwrap();
    let read_only = tpt
        .register(
            s.pd,
            vec![0x5a; 4096],
            Base::ZeroBased,
            Access::REMOTE_READ | Access::LOCAL_READ,
        )
        .unwrap();
    let dead = tpt
        .register(s.pd, vec![0x5a; 64], Base::ZeroBased, ALL)
        .unwrap();
    tpt.deregister(dead).unwrap();
    let stale = tpt
        .register(s.pd, vec![0x5a; 64], Base::ZeroBased, ALL)
        .unwrap();
    assert_eq!(
        stale.index(),
        dead.index(),
        "the index is reused with a new instance"
    );
    let recv_buf = tpt
        .register(s.pd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    let alive = tpt
        .register(s.pd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    let checksum = |tpt: &offload_engine::tpt::Tpt| {
        let mut all = Vec::new();
        for (pd, stag, to, len) in [
            (s.pd, target, 0x1_0000, 4096),
            (other_pd, foreign, 0, 4096),
            (s.pd, read_only, 0, 4096),
            (s.pd, stale, 0, 64),
        ] {
            let mut b = vec![0; len];
            tpt.read(pd, stag, to, &mut b).unwrap();
            all.extend(b);
        }
        all
    };
    let before = checksum(tpt);
    let (neighbour, _n) = connect(&c, &s, None).await;
    let cases: [(&str, SendWr, [u8; 2]); 6] = [
        (
            "invalid STag",
            write(
                1,
                b"x",
                RemoteBuf {
                    stag: STag::new(0xabcd, 1),
                    to: 0,
                    len: 1,
                },
            ),
            [0x11, 0x00],
        ),
        (
            "stale instance",
            write(
                1,
                b"x",
                RemoteBuf {
                    stag: dead,
                    to: 0,
                    len: 1,
                },
            ),
            [0x11, 0x00],
        ),
        (
            "wrong PD",
            write(
                1,
                b"x",
                RemoteBuf {
                    stag: foreign,
                    to: 0,
                    len: 1,
                },
            ),
            [0x11, 0x02],
        ),
        (
            "one byte past the end",
            write(
                1,
                b"xy",
                RemoteBuf {
                    stag: target,
                    to: 0x1_0000 + 4095,
                    len: 2,
                },
            ),
            [0x11, 0x01],
        ),
        (
            "missing right",
            write(
                1,
                b"x",
                RemoteBuf {
                    stag: read_only,
                    to: 0,
                    len: 1,
                },
            ),
            [0x01, 0x02],
        ),
        (
            "no posted receive",
            send(1, b"x", None, SendFlags::NONE),
            [0x12, 0x02],
        ),
    ];
    for (name, wr, wire) in cases {
        let (cqp, sqp) = connect(&c, &s, None).await;
        if name != "no posted receive" {
            sqp.post_recv(RecvWr {
                wr_id: 42,
                sgl: [Sge {
                    stag: recv_buf,
                    to: 0,
                    len: 64,
                }]
                .into(),
            })
            .unwrap();
        }
        cqp.post_send(wr).unwrap();
        match sqp.closed().await {
            QpEnd::Terminated(code) => assert_eq!(code.to_wire(), wire, "{name}: {code}"),
            other => panic!("{name}: {other:?}"),
        }
        assert!(
            matches!(cqp.closed().await, QpEnd::TerminatedByPeer(_)),
            "{name}"
        );
        assert_eq!(sqp.state(), QpState::Error, "{name}");
        assert!(checksum(tpt) == before, "{name}: target memory changed");
        // The neighbour connection still works.
        neighbour
            .post_send(write(
                7,
                b"alive",
                RemoteBuf {
                    stag: alive,
                    to: 0,
                    len: 5,
                },
            ))
            .unwrap();
        loop {
            let wc = next(&c.cq).await;
            if wc.wc.wr_id == 7 && wc.qp == neighbour.num() {
                assert!(wc.wc.is_ok(), "{name}: neighbour {wc:?}");
                break;
            }
        }
    }
    // Receives posted on terminated queue pairs were flushed.
    let mut flushed = Vec::new();
    s.cq.poll(&mut flushed, 100).unwrap();
    assert_eq!(flushed.iter().filter(|w| w.wc.wr_id == 42).count(), 5);
    assert!(flushed.iter().all(|w| w.wc.status == WcStatus::Flushed));
}
