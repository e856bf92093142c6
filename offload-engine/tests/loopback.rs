//! Two engines over loopback TCP: connection setup, every operation, a Terminate, and a
//! graceful close, with real sockets and the real TPT.

use std::net::SocketAddr;

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Listener, Qp, QpEnd, QpInit, Wc};
use rdmap::{
    Access, Payload, QpState, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};

const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC);

struct Side {
    engine: Engine,
    pd: PdId,
    cq: Cq,
    qp: Qp,
}

/// A server engine listening on loopback, a client engine, and where the server listens.
async fn engines(cfg: EngineConfig) -> (Engine, Engine, Listener, SocketAddr) {
    let server = Engine::new(cfg.clone());
    let client = Engine::new(cfg);
    let listener = server
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("listen");
    let addr = listener.local_addr();
    (server, client, listener, addr)
}

/// A client and a server engine, connected.
async fn pair(cfg: EngineConfig) -> (Side, Side) {
    let (server, client, listener, addr) = engines(cfg).await;
    let (spd, scq) = (server.alloc_pd(), Cq::new(1024));
    let (cpd, ccq) = (client.alloc_pd(), Cq::new(1024));
    let accept = {
        let scq = scq.clone();
        tokio::spawn(async move {
            let inc = listener.accept().await.expect("incoming");
            assert_eq!(&inc.private_data()[..], b"hello");
            inc.accept(QpInit::new(spd, &scq), b"welcome")
                .await
                .expect("accept")
        })
    };
    let (cqp, pd) = client
        .connect(addr, QpInit::new(cpd, &ccq), b"hello")
        .await
        .expect("connect");
    assert_eq!(&pd[..], b"welcome");
    let sqp = accept.await.unwrap();
    (
        Side {
            engine: client,
            pd: cpd,
            cq: ccq,
            qp: cqp,
        },
        Side {
            engine: server,
            pd: spd,
            cq: scq,
            qp: sqp,
        },
    )
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

async fn next_ok(cq: &Cq) -> Wc {
    let wc = cq.next().await.expect("cq");
    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
    wc
}

#[tokio::test]
async fn send_write_read_atomic_over_loopback() {
    let (c, s) = pair(EngineConfig::default()).await;
    let tpt_c = c.engine.tpt();
    let tpt_s = s.engine.tpt();
    let sbuf = tpt_s
        .register(s.pd, vec![0; 1 << 20], Base::Va(0x10_0000), ALL)
        .unwrap();
    let cbuf = tpt_c
        .register(c.pd, vec![0; 1 << 20], Base::ZeroBased, ALL)
        .unwrap();

    // Send into a posted receive.
    s.qp.post_recv(RecvWr {
        wr_id: 10,
        sgl: [Sge {
            stag: sbuf,
            to: 0x10_0000,
            len: 4096,
        }]
        .into(),
    })
    .unwrap();
    let msg = pattern(3000, 1);
    c.qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::from(msg.clone())),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert_eq!(next_ok(&c.cq).await.wc.wr_id, 1);
    let wc = next_ok(&s.cq).await;
    assert_eq!(
        (wc.wc.wr_id, wc.wc.opcode, wc.wc.byte_len),
        (10, WcOpcode::Recv, 3000)
    );
    let mut got = vec![0; 3000];
    tpt_s.read(s.pd, sbuf, 0x10_0000, &mut got).unwrap();
    assert_eq!(got, msg);

    // A 700 KiB RDMA Write, then a Read of it back into the client's region.
    let big = pattern(700 * 1024, 7);
    c.qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::from(big.clone())),
            dst: RemoteBuf {
                stag: sbuf,
                to: 0x10_0000 + 4096,
                len: big.len() as u32,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    c.qp.post_send(SendWr {
        wr_id: 3,
        op: SendOp::Read {
            src: RemoteBuf {
                stag: sbuf,
                to: 0x10_0000 + 4096,
                len: big.len() as u32,
            },
            dst: Sge {
                stag: cbuf,
                to: 0,
                len: big.len() as u32,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    assert_eq!(next_ok(&c.cq).await.wc.wr_id, 2);
    let rd = next_ok(&c.cq).await;
    assert_eq!((rd.wc.wr_id, rd.wc.opcode), (3, WcOpcode::Read));
    let mut back = vec![0; big.len()];
    tpt_c.read(c.pd, cbuf, 0, &mut back).unwrap();
    assert!(back == big, "read back what was written");

    // Atomic Fetch-and-Add on the server's memory.
    c.qp.post_send(SendWr {
        wr_id: 4,
        op: SendOp::FetchAdd {
            dst: RemoteBuf {
                stag: sbuf,
                to: 0x10_0000 + 8,
                len: 8,
            },
            add: 5,
            mask: 0,
            result: Sge {
                stag: cbuf,
                to: 0,
                len: 8,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let at = next_ok(&c.cq).await;
    let orig = u64::from_le_bytes(msg[8..16].try_into().unwrap());
    assert_eq!(at.wc.atomic_orig, Some(orig));
    assert_eq!(c.qp.state(), QpState::Rts);
    assert_eq!(s.qp.state(), QpState::Rts);
}

#[tokio::test]
async fn a_bad_stag_terminates_both_sides_and_flushes() {
    let (c, s) = pair(EngineConfig::default()).await;
    let sbuf = s
        .engine
        .tpt()
        .register(s.pd, vec![9; 64], Base::ZeroBased, ALL)
        .unwrap();
    s.qp.post_recv(RecvWr {
        wr_id: 77,
        sgl: [Sge {
            stag: sbuf,
            to: 0,
            len: 64,
        }]
        .into(),
    })
    .unwrap();
    let bad = STag::new(sbuf.index(), sbuf.instance().wrapping_add(1));
    c.qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::from_static(b"nope")),
            dst: RemoteBuf {
                stag: bad,
                to: 0,
                len: 4,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let server_end = s.qp.closed().await;
    let client_end = c.qp.closed().await;
    let code = match server_end {
        QpEnd::Terminated(code) => code,
        other => panic!("server: {other:?}"),
    };
    assert_eq!(code.to_wire(), [0x11, 0x00]);
    assert_eq!(client_end, QpEnd::TerminatedByPeer(code));
    let flushed = s.cq.next().await.unwrap();
    assert_eq!(
        (flushed.wc.wr_id, flushed.wc.status),
        (77, WcStatus::Flushed)
    );
    let mut mem = vec![0; 64];
    s.engine.tpt().read(s.pd, sbuf, 0, &mut mem).unwrap();
    assert_eq!(mem, vec![9; 64], "nothing placed");
    // Posting to a dead queue pair completes at once as flushed.
    c.qp.post_send(SendWr {
        wr_id: 5,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::new()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    loop {
        let wc = c.cq.next().await.unwrap();
        if wc.wc.wr_id == 5 {
            assert_eq!(wc.wc.status, WcStatus::Flushed);
            break;
        }
    }
}

#[tokio::test]
async fn graceful_disconnect() {
    let (c, s) = pair(EngineConfig::default()).await;
    c.qp.disconnect();
    assert_eq!(c.qp.closed().await, QpEnd::Closed);
    assert_eq!(s.qp.closed().await, QpEnd::Closed);
}

#[tokio::test]
async fn many_queue_pairs_at_once() {
    let (server, client, listener, addr) = engines(EngineConfig::default()).await;
    let (spd, scq) = (server.alloc_pd(), Cq::new(8192));
    let sbuf = server
        .tpt()
        .register(spd, vec![0; 256 * 64], Base::ZeroBased, ALL)
        .unwrap();
    let n = 256;
    let acceptor = {
        let scq = scq.clone();
        tokio::spawn(async move {
            let mut qps = Vec::new();
            for _ in 0..n {
                let inc = listener.accept().await.unwrap();
                qps.push(inc.accept(QpInit::new(spd, &scq), b"").await.unwrap());
            }
            qps
        })
    };
    let (cpd, ccq) = (client.alloc_pd(), Cq::new(8192));
    let mut cqps = Vec::new();
    for _ in 0..n {
        cqps.push(
            client
                .connect(addr, QpInit::new(cpd, &ccq), b"")
                .await
                .unwrap()
                .0,
        );
    }
    let sqps = acceptor.await.unwrap();
    for (i, qp) in cqps.iter().enumerate() {
        qp.post_send(SendWr {
            wr_id: i as u64,
            op: SendOp::Write {
                data: Payload::Bytes(Bytes::from(vec![i as u8; 64])),
                dst: RemoteBuf {
                    stag: sbuf,
                    to: i as u64 * 64,
                    len: 64,
                },
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    }
    for _ in 0..n {
        next_ok(&ccq).await;
    }
    // Writes complete at the socket; a Read on each QP proves placement on every stream.
    let cbuf = client
        .tpt()
        .register(cpd, vec![0; 256 * 64], Base::ZeroBased, ALL)
        .unwrap();
    for (i, qp) in cqps.iter().enumerate() {
        qp.post_send(SendWr {
            wr_id: 1000 + i as u64,
            op: SendOp::Read {
                src: RemoteBuf {
                    stag: sbuf,
                    to: i as u64 * 64,
                    len: 64,
                },
                dst: Sge {
                    stag: cbuf,
                    to: i as u64 * 64,
                    len: 64,
                },
            },
            flags: SendFlags::SIGNALED,
        })
        .unwrap();
    }
    for _ in 0..n {
        next_ok(&ccq).await;
    }
    let mut all = vec![0; 256 * 64];
    client.tpt().read(cpd, cbuf, 0, &mut all).unwrap();
    for i in 0..n {
        assert!(
            all[i * 64..(i + 1) * 64].iter().all(|&b| b == i as u8),
            "qp {i}"
        );
    }
    assert!(sqps.iter().all(|q| q.state() == QpState::Rts));
}

#[tokio::test]
async fn per_request_futures_bypass_the_cq() {
    let (c, s) = pair(EngineConfig::default()).await;
    let sbuf = s
        .engine
        .tpt()
        .register(s.pd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    let recv =
        s.qp.post_recv_notify(RecvWr {
            wr_id: 0,
            sgl: [Sge {
                stag: sbuf,
                to: 0,
                len: 64,
            }]
            .into(),
        })
        .unwrap();
    let sent =
        c.qp.post_send_notify(SendWr {
            wr_id: 0,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"ping")),
                invalidate: None,
                immediate: None,
            },
            flags: SendFlags::NONE,
        })
        .unwrap();
    assert!(sent.await.is_ok());
    let wc = recv.await;
    assert_eq!(wc.byte_len, 4);
    assert!(
        c.cq.is_empty() && s.cq.is_empty(),
        "nothing went to the CQs"
    );
    // Engine-wide orderly shutdown ends every queue pair.
    c.engine.shutdown().await;
    assert_eq!(s.qp.closed().await, QpEnd::Closed);
}

#[tokio::test]
async fn receives_posted_at_accept_catch_the_first_send() {
    let (server, client, listener, addr) = engines(EngineConfig::default()).await;
    let (spd, scq) = (server.alloc_pd(), Cq::new(64));
    let buf = server
        .tpt()
        .register(spd, vec![0; 64], Base::ZeroBased, ALL)
        .unwrap();
    let accept = {
        let scq = scq.clone();
        tokio::spawn(async move {
            let mut init = QpInit::new(spd, &scq);
            init.recvs = vec![RecvWr {
                wr_id: 3,
                sgl: [Sge {
                    stag: buf,
                    to: 0,
                    len: 64,
                }]
                .into(),
            }];
            listener
                .accept()
                .await
                .unwrap()
                .accept(init, b"")
                .await
                .unwrap()
        })
    };
    let ccq = Cq::new(64);
    let (qp, _) = client
        .connect(addr, QpInit::new(client.alloc_pd(), &ccq), b"")
        .await
        .unwrap();
    // Sent the moment the Reply arrived: the server's receive was already there.
    qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(b"first")),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    let _sqp = accept.await.unwrap();
    let wc = next_ok(&scq).await;
    assert_eq!((wc.wc.wr_id, wc.wc.byte_len), (3, 5));
}

#[tokio::test]
async fn reserved_work_request_ids_are_refused() {
    let (c, _s) = pair(EngineConfig::default()).await;
    let wr = SendWr {
        wr_id: offload_engine::NOTIFY_BIT | 1,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::new()),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::SIGNALED,
    };
    let err = c.qp.post_send(wr).unwrap_err();
    assert_eq!(err, rdmap::PostError::ReservedWrId);
    assert!(err.to_string().contains("below 2^63"));
}

/// Initial receives are held to the same rule as posted ones: an id with the reserved bit
/// would have its completion routed to a future that does not exist, so the connect is
/// refused, naming the receive.
#[tokio::test]
async fn a_reserved_id_among_the_initial_receives_is_refused() {
    let (server, client, listener, addr) = engines(EngineConfig::default()).await;
    let spd = server.alloc_pd();
    tokio::spawn(async move {
        if let Ok(inc) = listener.accept().await {
            let _ = inc.accept(QpInit::new(spd, &Cq::new(16)), b"").await;
        }
    });
    let cq = Cq::new(16);
    let mut init = QpInit::new(client.alloc_pd(), &cq);
    init.recvs = vec![RecvWr {
        wr_id: offload_engine::NOTIFY_BIT | 7,
        sgl: Default::default(),
    }];
    let err = client.connect(addr, init, b"").await.unwrap_err();
    assert!(
        matches!(&err, offload_engine::ConnectError::Invalid(m) if m.contains("0x8000000000000007")),
        "{err}"
    );
}

/// Completions that go to a sink: every id is the layer above's (one with the future bit
/// is accepted, at connect time and when posted, and comes back unchanged), and a post
/// with a future is refused, since the future would never finish.
#[tokio::test]
async fn a_sink_takes_every_completion_with_its_id_as_posted() {
    #[derive(Debug, Default)]
    struct Collect(std::sync::Mutex<Vec<rdmap::Completion>>);
    impl offload_engine::CompletionSink for Collect {
        fn deliver(&self, _qp: rdmap::QpNum, batch: &mut Vec<rdmap::Completion>) {
            self.0.lock().unwrap().append(batch);
        }
    }
    let (server, client, listener, addr) = engines(EngineConfig::default()).await;
    let spd = server.alloc_pd();
    let scq = Cq::new(16);
    let accepting = {
        let scq = scq.clone();
        tokio::spawn(async move {
            let inc = listener.accept().await.expect("incoming");
            inc.accept(QpInit::new(spd, &scq), b"")
                .await
                .expect("accept")
        })
    };
    let sink = std::sync::Arc::new(Collect::default());
    let id = offload_engine::NOTIFY_BIT | 7;
    let mut init = QpInit::with_completions(
        client.alloc_pd(),
        offload_engine::Completions::Sink(sink.clone()),
    );
    init.recvs = vec![RecvWr {
        wr_id: id + 1,
        sgl: Default::default(),
    }];
    let (qp, _) = client.connect(addr, init, b"").await.expect("connect");
    let _server = accepting.await.unwrap();
    // A zero-length Write touches nothing on the peer and completes at the socket.
    let write = |wr_id| SendWr {
        wr_id,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::new()),
            dst: RemoteBuf {
                stag: STag::from_u32(0x100),
                to: 0,
                len: 0,
            },
        },
        flags: SendFlags::SIGNALED,
    };
    assert_eq!(
        qp.post_send_notify(write(1)).map(drop),
        Err(rdmap::PostError::NoFutures)
    );
    qp.post_send(write(id)).expect("any id is the sink's");
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(wc) = sink.0.lock().unwrap().first() {
            assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no completion reached the sink"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
