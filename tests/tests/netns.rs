//! Two engines on two hosts (network namespaces joined by a veth pair): connection setup
//! with private data, Send/Write/Read, 256 queue pairs at once, a 1 GiB transfer verified
//! by CRC32c, protection failures that end one queue pair with the exact Terminate while
//! another keeps working, live migration under a verified loop, and seed 003/001/004's
//! extensions (Send with Immediate, Read V2, register-and-send, drain, Delay, refusing
//! incoming RDMA, a shared send queue, one-touch windows). Every test prints `SKIPPED: <reason>` and returns where
//! namespaces cannot be made (not root, no `ip`).
//!
//! Host a (10.199.X.1) runs the server engine, host b (10.199.X.2) the client engine; each
//! runs on its own thread and tokio runtime, so the traffic really crosses the veth link
//! and the kernel's TCP. Test control (who is ready, what to expect) goes over channels.

use std::future::Future;
use std::io::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use bytes::Bytes;
use offload_engine::tpt::{Base, PdId};
use offload_engine::{Cq, Engine, EngineConfig, Qp, QpEnd, QpInit, Srq, Wc};
use rdmap::{
    Access, Payload, QpState, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, TermCode,
    WcOpcode, WcStatus,
};
use tests::netns::two_hosts_or_skip;
use tokio::sync::oneshot;

/// The server's port: each pair of hosts is new, so a fixed port never clashes.
const PORT: u16 = 4791;
const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);
const LOCAL: Access = Access::LOCAL_READ.union(Access::LOCAL_WRITE);
/// The longest one completion may take.
const WAIT: Duration = Duration::from_secs(30);
/// The longest one host's part of a test may take.
const HOST_LIMIT: Duration = Duration::from_secs(300);

/// Runs a host's part with a time limit, so a peer that died cannot hang the test.
async fn limit<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HOST_LIMIT, f)
        .await
        .expect("this host's part of the test timed out (did the other host fail?)")
}

async fn next_wc(cq: &Cq) -> Wc {
    tokio::time::timeout(WAIT, cq.next())
        .await
        .expect("a completion in time")
        .expect("the CQ works")
}

async fn next_ok(cq: &Cq) -> Wc {
    let wc = next_wc(cq).await;
    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
    wc
}

/// Reproducible pseudo-random octets for `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    rdmap::testing::XorShift::new(seed).bytes(len)
}

fn wr(wr_id: u64, op: SendOp) -> SendWr {
    SendWr {
        wr_id,
        op,
        flags: SendFlags::SIGNALED,
    }
}

fn send(data: impl Into<Bytes>) -> SendOp {
    SendOp::Send {
        data: Payload::Bytes(data.into()),
        invalidate: None,
        immediate: None,
    }
}

fn write(data: impl Into<Bytes>, dst: RemoteBuf) -> SendOp {
    SendOp::Write {
        data: Payload::Bytes(data.into()),
        dst,
    }
}

fn recv(wr_id: u64, stag: STag, to: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sgl: [Sge { stag, to, len }].into(),
    }
}

fn read_mem(engine: &Engine, pd: PdId, stag: STag, to: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    engine.tpt().read(pd, stag, to, &mut v).expect("local read");
    v
}

/// Prints a measurement past the test harness's capture.
fn report(what: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{what}");
}

#[test]
fn connect_with_private_data_then_send_write_read_across_the_veth() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let b_ip = net.b().addr();
    let (ready_tx, ready_rx) = oneshot::channel();
    const BIG: usize = 700 * 1024;

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.expect("listen on host a");
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.expect("a connection request");
            assert_eq!(
                inc.peer_addr().ip(),
                IpAddr::V4(b_ip),
                "the request came from host b over the veth"
            );
            assert_eq!(&inc.private_data()[..], b"hello from b");
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let region = tpt
                .register(pd, vec![0; 1 << 20], Base::ZeroBased, ALL)
                .unwrap();
            let inbox = tpt
                .register(pd, vec![0; 2 * 4096], Base::ZeroBased, LOCAL)
                .unwrap();
            // Receives go on a shared receive queue before the Reply leaves, so the
            // client's first Send cannot arrive before a buffer.
            let srq = Srq::new();
            srq.post_recv(recv(0, inbox, 0, 4096));
            srq.post_recv(recv(1, inbox, 4096, 4096));
            let cq = Cq::new(64);
            let init = QpInit {
                srq: Some(srq),
                ..QpInit::new(pd, &cq)
            };
            let advertised = RemoteBuf {
                stag: region,
                to: 0,
                len: 1 << 20,
            };
            let qp = inc
                .accept(init, &advertised.encode())
                .await
                .expect("accept");
            let wc = next_ok(&cq).await;
            assert_eq!(
                (wc.wc.wr_id, wc.wc.opcode, wc.wc.byte_len),
                (0, WcOpcode::Recv, 3000)
            );
            assert_eq!(read_mem(&engine, pd, inbox, 0, 3000), pattern(1, 3000));
            // The second Send follows the Write on the same stream: the Write is placed.
            let wc = next_ok(&cq).await;
            assert_eq!((wc.wc.wr_id, wc.wc.byte_len), (1, 4));
            assert_eq!(read_mem(&engine, pd, inbox, 4096, 4), b"done");
            // This stack's Send with Immediate Data (both engines agreed to the extensions).
            assert_eq!(wc.wc.immediate, Some(0xfeed_f00d));
            assert!(
                read_mem(&engine, pd, region, 4096, BIG) == pattern(7, BIG),
                "the RDMA Write landed in the advertised region"
            );
            qp.closed().await
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let cq = Cq::new(64);
            let (qp, private) = engine
                .connect(server_addr, QpInit::new(pd, &cq), b"hello from b")
                .await
                .expect("connect from host b");
            let remote = RemoteBuf::decode(&private).expect("a RemoteBuf in the private data");
            assert_eq!(remote.len, 1 << 20);
            assert_eq!(qp.state(), QpState::Rts);

            qp.post_send(wr(1, send(pattern(1, 3000)))).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 1);

            let local = engine
                .tpt()
                .register(pd, vec![0; BIG], Base::ZeroBased, LOCAL)
                .unwrap();
            let dst = remote.slice(4096, BIG as u32);
            qp.post_send(wr(2, write(pattern(7, BIG), dst))).unwrap();
            qp.post_send(wr(
                3,
                SendOp::Read {
                    src: dst,
                    dst: Sge {
                        stag: local,
                        to: 0,
                        len: BIG as u32,
                    },
                },
            ))
            .unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 2);
            let rd = next_ok(&cq).await;
            assert_eq!(
                (rd.wc.wr_id, rd.wc.opcode, rd.wc.byte_len),
                (3, WcOpcode::Read, BIG as u32)
            );
            assert!(
                read_mem(&engine, pd, local, 0, BIG) == pattern(7, BIG),
                "read back what was written"
            );

            // Both engines are this stack: the extensions are agreed, so the Read above
            // was a Read V2 and this Send carries an immediate value.
            assert_eq!(qp.extensions(), rdmap::Extensions::ALL);
            let done = SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"done")),
                invalidate: None,
                immediate: Some(0xfeed_f00d),
            };
            qp.post_send(wr(4, done)).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 4);
            qp.disconnect();
            qp.closed().await
        })
    });
    assert_eq!(client.join(), QpEnd::Closed);
    assert_eq!(server.join(), QpEnd::Closed);
}

#[test]
fn two_hundred_fifty_six_queue_pairs_at_once_across_the_veth() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    const N: usize = 256;
    const SLOT: usize = 64;
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.unwrap();
            ready_tx.send(()).unwrap();
            let pd = engine.alloc_pd();
            let cq = Cq::new(8 * N);
            let region = engine
                .tpt()
                .register(pd, vec![0; N * SLOT], Base::ZeroBased, ALL)
                .unwrap();
            let buf = RemoteBuf {
                stag: region,
                to: 0,
                len: (N * SLOT) as u32,
            };
            let mut qps = Vec::new();
            for _ in 0..N {
                let inc = listener.accept().await.unwrap();
                qps.push(
                    inc.accept(QpInit::new(pd, &cq), &buf.encode())
                        .await
                        .unwrap(),
                );
            }
            assert_eq!(engine.qps().len(), N, "every queue pair is alive at once");
            let mut ends = Vec::new();
            for qp in &qps {
                ends.push(qp.closed().await);
            }
            let mem = read_mem(&engine, pd, region, 0, N * SLOT);
            for (i, slot) in mem.chunks(SLOT).enumerate() {
                assert!(slot.iter().all(|&b| b == i as u8), "slot {i}");
            }
            ends
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let cq = Cq::new(8 * N);
            let mut qps = Vec::new();
            let mut remote = None;
            for _ in 0..N {
                let (qp, private) = engine
                    .connect(server_addr, QpInit::new(pd, &cq), b"")
                    .await
                    .unwrap();
                remote = RemoteBuf::decode(&private);
                qps.push(qp);
            }
            let remote = remote.expect("a RemoteBuf");
            assert_eq!(engine.qps().len(), N);
            let local = engine
                .tpt()
                .register(pd, vec![0; N * SLOT], Base::ZeroBased, LOCAL)
                .unwrap();
            // One Write per queue pair, then a Read on each: a Read completes only when
            // its response was placed, which proves every stream carried its Write.
            for (i, qp) in qps.iter().enumerate() {
                let dst = remote.slice((i * SLOT) as u32, SLOT as u32);
                qp.post_send(wr(i as u64, write(vec![i as u8; SLOT], dst)))
                    .unwrap();
            }
            for _ in 0..N {
                next_ok(&cq).await;
            }
            for (i, qp) in qps.iter().enumerate() {
                let src = remote.slice((i * SLOT) as u32, SLOT as u32);
                let dst = Sge {
                    stag: local,
                    to: (i * SLOT) as u64,
                    len: SLOT as u32,
                };
                qp.post_send(wr(1000 + i as u64, SendOp::Read { src, dst }))
                    .unwrap();
            }
            for _ in 0..N {
                let wc = next_ok(&cq).await;
                assert_eq!(wc.wc.opcode, WcOpcode::Read);
            }
            let mem = read_mem(&engine, pd, local, 0, N * SLOT);
            for (i, slot) in mem.chunks(SLOT).enumerate() {
                assert!(slot.iter().all(|&b| b == i as u8), "qp {i} read back");
            }
            for qp in &qps {
                qp.disconnect();
            }
            let mut ends = Vec::new();
            for qp in &qps {
                ends.push(qp.closed().await);
            }
            ends
        })
    });
    let client_ends = client.join();
    let server_ends = server.join();
    assert_eq!(client_ends.len(), N);
    assert!(
        client_ends.iter().all(|e| *e == QpEnd::Closed),
        "{client_ends:?}"
    );
    assert!(
        server_ends.iter().all(|e| *e == QpEnd::Closed),
        "{server_ends:?}"
    );
}

/// 1 GiB of RDMA Writes, 1 MiB each, into a 64 MiB region (write i lands at
/// `(i % 64)` MiB). After each 64 MiB batch a Send (ordered after the Writes) asks the
/// server for the CRC32c of its region; the client compares it with the CRC of what it
/// sent, and both keep a CRC of the whole GiB in order. Then the region is Read back.
#[test]
fn one_gib_of_rdma_writes_verified_by_crc32c() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    const CHUNK: usize = 1 << 20;
    const PER_BATCH: usize = 64;
    const REGION: usize = CHUNK * PER_BATCH;
    const BATCHES: usize = 16;
    const WINDOW: usize = 16;
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.unwrap();
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.unwrap();
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let region = tpt
                .register(pd, vec![0; REGION], Base::ZeroBased, ALL)
                .unwrap();
            let inbox = tpt
                .register(pd, vec![0; 4 * 8], Base::ZeroBased, LOCAL)
                .unwrap();
            let srq = Srq::new();
            for i in 0..4 {
                srq.post_recv(recv(i, inbox, i * 8, 8));
            }
            let cq = Cq::new(256);
            let init = QpInit {
                srq: Some(srq.clone()),
                ..QpInit::new(pd, &cq)
            };
            let buf = RemoteBuf {
                stag: region,
                to: 0,
                len: REGION as u32,
            };
            let qp = inc.accept(init, &buf.encode()).await.unwrap();
            let mut snapshot = vec![0; REGION];
            let mut running = 0u32;
            for k in 0..BATCHES as u64 {
                let wc = loop {
                    let wc = next_ok(&cq).await;
                    if wc.wc.opcode == WcOpcode::Recv {
                        break wc;
                    }
                };
                let slot = wc.wc.wr_id;
                let msg = read_mem(&engine, pd, inbox, slot * 8, 8);
                assert_eq!(msg, k.to_le_bytes(), "batch markers arrive in order");
                srq.post_recv(recv(slot, inbox, slot * 8, 8));
                tpt.read(pd, region, 0, &mut snapshot).unwrap();
                let batch = crc32c::crc32c(&snapshot);
                running = crc32c::crc32c_append(running, &snapshot);
                let mut reply = batch.to_le_bytes().to_vec();
                reply.extend_from_slice(&running.to_le_bytes());
                qp.post_send(SendWr {
                    wr_id: k,
                    op: send(reply),
                    flags: SendFlags::NONE,
                })
                .unwrap();
            }
            assert_eq!(qp.closed().await, QpEnd::Closed);
            running
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let (send_cq, recv_cq) = (Cq::new(1024), Cq::new(64));
            let mut init = QpInit::new(pd, &send_cq);
            init.completions = offload_engine::Completions::queues(&send_cq, &recv_cq);
            let (qp, private) = engine.connect(server_addr, init, b"").await.unwrap();
            let remote = RemoteBuf::decode(&private).unwrap();
            assert_eq!(remote.len as usize, REGION);
            let replies = engine
                .tpt()
                .register(pd, vec![0; BATCHES * 8], Base::ZeroBased, LOCAL)
                .unwrap();
            for k in 0..BATCHES as u64 {
                qp.post_recv(recv(k, replies, k * 8, 8)).unwrap();
            }
            let mut outstanding = 0;
            let mut running = 0u32;
            let mut batch = 0u32;
            let start = Instant::now();
            for k in 0..BATCHES {
                batch = 0;
                for j in 0..PER_BATCH {
                    let data = pattern((k * PER_BATCH + j) as u64, CHUNK);
                    batch = crc32c::crc32c_append(batch, &data);
                    running = crc32c::crc32c_append(running, &data);
                    if outstanding == WINDOW {
                        next_ok(&send_cq).await;
                        outstanding -= 1;
                    }
                    let dst = remote.slice((j * CHUNK) as u32, CHUNK as u32);
                    qp.post_send(wr(j as u64, write(data, dst))).unwrap();
                    outstanding += 1;
                }
                qp.post_send(wr(1 << 20, send((k as u64).to_le_bytes().to_vec())))
                    .unwrap();
                outstanding += 1;
                let wc = next_ok(&recv_cq).await;
                assert_eq!(wc.wc.wr_id, k as u64);
                let reply = read_mem(&engine, pd, replies, k as u64 * 8, 8);
                let server_batch = u32::from_le_bytes(reply[..4].try_into().unwrap());
                let server_running = u32::from_le_bytes(reply[4..].try_into().unwrap());
                assert_eq!(server_batch, batch, "CRC32c of batch {k} on the server");
                assert_eq!(
                    server_running, running,
                    "CRC32c of everything up to batch {k}"
                );
            }
            while outstanding > 0 {
                next_ok(&send_cq).await;
                outstanding -= 1;
            }
            let elapsed = start.elapsed();
            // Read the whole region back in one RDMA Read.
            let local = engine
                .tpt()
                .register(pd, vec![0; REGION], Base::ZeroBased, LOCAL)
                .unwrap();
            let read_start = Instant::now();
            qp.post_send(wr(
                7,
                SendOp::Read {
                    src: remote,
                    dst: Sge {
                        stag: local,
                        to: 0,
                        len: REGION as u32,
                    },
                },
            ))
            .unwrap();
            let rd = next_ok(&send_cq).await;
            assert_eq!(
                (rd.wc.opcode, rd.wc.byte_len as usize),
                (WcOpcode::Read, REGION)
            );
            let read_elapsed = read_start.elapsed();
            let back = read_mem(&engine, pd, local, 0, REGION);
            assert_eq!(
                crc32c::crc32c(&back),
                batch,
                "the Read returns the last batch"
            );
            qp.disconnect();
            assert_eq!(qp.closed().await, QpEnd::Closed);
            (running, elapsed, read_elapsed)
        })
    });
    let (client_crc, elapsed, read_elapsed) = client.join();
    let server_crc = server.join();
    assert_eq!(client_crc, server_crc, "CRC32c of the whole GiB");
    let secs = elapsed.as_secs_f64();
    report(format_args!(
        "netns: 1 GiB of RDMA Writes (1 MiB each, {WINDOW} in flight) verified by CRC32c in \
         {secs:.2} s ({:.0} MiB/s, including generating and checksumming the data); \
         64 MiB RDMA Read back in {:.3} s",
        1024.0 / secs,
        read_elapsed.as_secs_f64()
    ));
}

/// What the client does wrong on each queue pair, and the Terminate the server must send.
fn expected_terms() -> [(&'static str, TermCode, [u8; 2]); 3] {
    [
        (
            "Write to a stale STag",
            TermCode::DDP_INVALID_STAG,
            [0x11, 0x00],
        ),
        (
            "Write past the region",
            TermCode::DDP_BASE_BOUNDS,
            [0x11, 0x01],
        ),
        ("Read of a stale STag", TermCode::INVALID_STAG, [0x01, 0x00]),
    ]
}

#[test]
fn protection_failures_terminate_one_queue_pair_and_spare_the_others() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    const LEN: usize = 64 * 1024;
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();
    let (posted_tx, posted_rx) = oneshot::channel();

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.unwrap();
            ready_tx.send(()).unwrap();
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let region = tpt
                .register(pd, vec![9; LEN], Base::ZeroBased, ALL)
                .unwrap();
            let inbox = tpt
                .register(pd, vec![0; 4 * 64], Base::ZeroBased, LOCAL)
                .unwrap();
            let buf = RemoteBuf {
                stag: region,
                to: 0,
                len: LEN as u32,
            };
            let mut qps: Vec<(Qp, Cq)> = Vec::new();
            for i in 0..4u64 {
                let cq = Cq::new(64);
                let inc = listener.accept().await.unwrap();
                let qp = inc
                    .accept(QpInit::new(pd, &cq), &buf.encode())
                    .await
                    .unwrap();
                qp.post_recv(recv(77 + i, inbox, i * 64, 64)).unwrap();
                qps.push((qp, cq));
            }
            posted_tx.send(()).unwrap();
            // The three broken queue pairs: the exact Terminate, and the receive flushed.
            for (i, (what, code, wire)) in expected_terms().into_iter().enumerate() {
                let (qp, cq) = &qps[i];
                assert_eq!(qp.closed().await, QpEnd::Terminated(code), "{what}");
                assert_eq!(code.to_wire(), wire);
                let wc = next_wc(cq).await;
                assert_eq!(
                    (wc.wc.wr_id, wc.wc.status),
                    (77 + i as u64, WcStatus::Flushed),
                    "{what}: the posted receive is flushed"
                );
                assert_eq!(qp.state(), QpState::Error);
            }
            // The fourth is untouched: it takes a Send.
            let (qp, cq) = &qps[3];
            assert_eq!(qp.state(), QpState::Rts);
            let wc = next_ok(cq).await;
            assert_eq!((wc.wc.wr_id, wc.wc.byte_len), (80, 10));
            assert_eq!(read_mem(&engine, pd, inbox, 3 * 64, 10), b"still fine");
            assert_eq!(qp.closed().await, QpEnd::Closed);
            // Nothing of the failed requests was placed; only the healthy Write was.
            let mem = read_mem(&engine, pd, region, 0, LEN);
            let mut expect = vec![9; LEN];
            expect[1024..1040].copy_from_slice(&pattern(3, 16));
            assert!(mem == expect, "memory holds exactly the healthy Write");
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let local = engine
                .tpt()
                .register(pd, vec![0; LEN], Base::ZeroBased, LOCAL)
                .unwrap();
            let mut qps: Vec<(Qp, Cq)> = Vec::new();
            let mut remote = None;
            for _ in 0..4 {
                let cq = Cq::new(64);
                let (qp, private) = engine
                    .connect(server_addr, QpInit::new(pd, &cq), b"")
                    .await
                    .unwrap();
                remote = RemoteBuf::decode(&private);
                qps.push((qp, cq));
            }
            let remote = remote.unwrap();
            let stale = STag::new(remote.stag.index(), remote.stag.instance().wrapping_add(1));
            posted_rx.await.unwrap();

            let sink = Sge {
                stag: local,
                to: 0,
                len: 4,
            };
            let bad_ops = [
                write(
                    &b"nope"[..],
                    RemoteBuf {
                        stag: stale,
                        to: 0,
                        len: 4,
                    },
                ),
                write(
                    &b"nope"[..],
                    RemoteBuf {
                        stag: remote.stag,
                        to: LEN as u64 - 2,
                        len: 4,
                    },
                ),
                SendOp::Read {
                    src: RemoteBuf {
                        stag: stale,
                        to: 0,
                        len: 4,
                    },
                    dst: sink,
                },
            ];
            for (i, ((what, code, _), op)) in expected_terms().into_iter().zip(bad_ops).enumerate()
            {
                let (qp, cq) = &qps[i];
                qp.post_send(wr(1, op)).unwrap();
                assert_eq!(qp.closed().await, QpEnd::TerminatedByPeer(code), "{what}");
                if i == 2 {
                    // The Read itself fails with the peer's Terminate.
                    let wc = next_wc(cq).await;
                    assert_eq!(
                        (wc.wc.wr_id, wc.wc.status, wc.wc.term),
                        (1, WcStatus::RemoteAccess, Some(code)),
                        "{what}"
                    );
                }
                // Work posted to the dead queue pair is flushed.
                qp.post_send(wr(2, send(&b"late"[..]))).unwrap();
                loop {
                    let wc = next_wc(cq).await;
                    if wc.wc.wr_id == 2 {
                        assert_eq!(wc.wc.status, WcStatus::Flushed, "{what}");
                        break;
                    }
                }
            }
            // The healthy queue pair on the same hosts still works.
            let (qp, cq) = &qps[3];
            assert_eq!(qp.state(), QpState::Rts);
            qp.post_send(wr(10, write(pattern(3, 16), remote.slice(1024, 16))))
                .unwrap();
            qp.post_send(wr(
                11,
                SendOp::Read {
                    src: remote,
                    dst: Sge {
                        stag: local,
                        to: 0,
                        len: LEN as u32,
                    },
                },
            ))
            .unwrap();
            qp.post_send(wr(12, send(&b"still fine"[..]))).unwrap();
            for id in [10, 11, 12] {
                assert_eq!(next_ok(cq).await.wc.wr_id, id);
            }
            let mem = read_mem(&engine, pd, local, 0, LEN);
            assert!(mem[..1024].iter().all(|&b| b == 9), "nothing placed before");
            assert_eq!(&mem[1024..1040], &pattern(3, 16)[..]);
            assert!(mem[1040..].iter().all(|&b| b == 9), "nothing placed after");
            qp.disconnect();
            assert_eq!(qp.closed().await, QpEnd::Closed);
        })
    });
    client.join();
    server.join();
}

/// One connection across the veth with `server_large`/`client_large` as each side's
/// large-FPDU setting: the client Writes `LEN` octets and Reads them back (so the server
/// sends Read Responses), then Sends "done". Returns, for (client, server), the largest
/// ULPDU each sends and the FPDUs each sent.
fn large_fpdu_run(
    net: &tests::netns::TwoHosts,
    port: u16,
    server_large: bool,
    client_large: bool,
) -> [(u16, u64); 2] {
    const LEN: usize = 256 * 1024;
    let server_addr = SocketAddr::from((net.a().addr(), port));
    let (ready_tx, ready_rx) = oneshot::channel();
    let config = |large: bool| {
        let mut cfg = EngineConfig::default();
        cfg.mpa.large_fpdus = large;
        cfg
    };
    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(config(server_large));
            let listener = engine.listen(server_addr).await.expect("listen on host a");
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.expect("a connection request");
            let pd = engine.alloc_pd();
            let region = engine
                .tpt()
                .register(pd, vec![0; LEN], Base::ZeroBased, ALL)
                .unwrap();
            let inbox = engine
                .tpt()
                .register(pd, vec![0; 64], Base::ZeroBased, LOCAL)
                .unwrap();
            let cq = Cq::new(8);
            let srq = Srq::new();
            srq.post_recv(recv(0, inbox, 0, 64));
            let init = QpInit {
                srq: Some(srq),
                ..QpInit::new(pd, &cq)
            };
            let qp = inc
                .accept(
                    init,
                    &RemoteBuf {
                        stag: region,
                        to: 0,
                        len: LEN as u32,
                    }
                    .encode(),
                )
                .await
                .expect("accept");
            assert_eq!(next_ok(&cq).await.wc.byte_len, 4);
            assert!(
                read_mem(&engine, pd, region, 0, LEN) == pattern(11, LEN),
                "the Write arrived intact"
            );
            let out = (qp.mulpdu(), qp.stats().fpdus_sent);
            qp.closed().await;
            out
        })
    });
    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(config(client_large));
            let pd = engine.alloc_pd();
            let cq = Cq::new(8);
            let (qp, private) = engine
                .connect(server_addr, QpInit::new(pd, &cq), b"")
                .await
                .expect("connect from host b");
            let remote = RemoteBuf::decode(&private).expect("a RemoteBuf");
            let local = engine
                .tpt()
                .register(pd, vec![0; LEN], Base::ZeroBased, LOCAL)
                .unwrap();
            qp.post_send(wr(1, write(pattern(11, LEN), remote)))
                .unwrap();
            let src = remote;
            let dst = Sge {
                stag: local,
                to: 0,
                len: LEN as u32,
            };
            qp.post_send(wr(2, SendOp::Read { src, dst })).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 1);
            assert_eq!(next_ok(&cq).await.wc.wr_id, 2);
            assert!(
                read_mem(&engine, pd, local, 0, LEN) == pattern(11, LEN),
                "the Read brought it back intact"
            );
            let out = (qp.mulpdu(), qp.stats().fpdus_sent);
            qp.post_send(wr(3, send(&b"done"[..]))).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 3);
            qp.disconnect();
            qp.closed().await;
            out
        })
    });
    [client.join(), server.join()]
}

#[test]
fn large_fpdus_cross_a_1500_octet_mtu_only_when_both_sides_offer_them() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    // What one segment of this link holds (MSS 1448 with timestamps, 1460 without).
    let segment = mpa::mulpdu(1460, false);
    for (i, (server, client)) in [(true, true), (true, false), (false, true), (false, false)]
        .into_iter()
        .enumerate()
    {
        let sides = ["client", "server"];
        let got = large_fpdu_run(&net, PORT + 1 + i as u16, server, client);
        report(format_args!(
            "large FPDUs server {server} client {client}: (MULPDU, FPDUs sent) {got:?}"
        ));
        for (side, (mulpdu, fpdus)) in sides.into_iter().zip(got) {
            if server && client {
                assert_eq!(mulpdu, mpa::MAX_ULPDU, "{side}: both offered");
                // 256 KiB (Write or Read Responses) in 64 KiB FPDUs, plus a few small ones.
                assert!(fpdus <= 12, "{side}: {fpdus} FPDUs");
            } else {
                assert!(
                    mulpdu <= segment,
                    "{side}: MULPDU {mulpdu} with no agreement"
                );
                assert!(fpdus >= 256 * 1024 / 1460, "{side}: {fpdus} FPDUs");
            }
        }
    }
}

/// Seeds 001 and 004 across the veth: the client drains its send queue on a local failure
/// and resumes, registers a region and advertises it in one request (the server writes
/// into it and gives it back with Send with Invalidate), holds a Send behind a Delay; the
/// server then refuses incoming RDMA and the client's Write ends the connection with the
/// access-rights Terminate, the server's region untouched.
#[test]
fn register_and_send_drain_delay_and_refusal_across_the_veth() {
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();
    const DELAY: Duration = Duration::from_millis(300);

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.expect("listen");
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.expect("a connection request");
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let region = tpt
                .register(pd, vec![0x5a; 4096], Base::ZeroBased, ALL)
                .unwrap();
            let inbox = tpt
                .register(pd, vec![0; 2 * 64], Base::ZeroBased, LOCAL)
                .unwrap();
            let cq = Cq::new(64);
            let mut init = QpInit::new(pd, &cq);
            init.recvs = vec![recv(100, inbox, 0, 64), recv(101, inbox, 64, 64)];
            let mine = RemoteBuf {
                stag: region,
                to: 0,
                len: 4096,
            };
            let qp = inc.accept(init, &mine.encode()).await.expect("accept");
            // The client's register-and-send: an advertisement of its fresh region.
            let wc = next_ok(&cq).await;
            assert_eq!((wc.wc.wr_id, wc.wc.byte_len), (100, 16));
            let advert = RemoteBuf::decode(&read_mem(&engine, pd, inbox, 0, 16)).unwrap();
            qp.post_send(wr(1, write(&b"hello from a"[..], advert)))
                .unwrap();
            let give_back = SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"done")),
                invalidate: Some(advert.stag),
                immediate: None,
            };
            qp.post_send(wr(2, give_back)).unwrap();
            let mut ids = Vec::new();
            for _ in 0..3 {
                ids.push(next_ok(&cq).await.wc.wr_id);
            }
            ids.sort_unstable();
            assert_eq!(
                ids,
                [1, 2, 101],
                "Write, Send with Invalidate, the delayed Send"
            );
            assert_eq!(read_mem(&engine, pd, inbox, 64, 11), b"after delay");
            // Now refuse incoming RDMA and tell the client.
            qp.set_incoming_rdma(false);
            qp.post_send(wr(3, send(&b"refusing"[..]))).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 3);
            let end = qp.closed().await;
            assert_eq!(end, QpEnd::Terminated(TermCode::ACCESS_RIGHTS));
            assert!(
                read_mem(&engine, pd, region, 0, 4096)
                    .iter()
                    .all(|&b| b == 0x5a)
            );
            end
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let inbox = tpt
                .register(pd, vec![0; 2 * 64], Base::ZeroBased, LOCAL)
                .unwrap();
            let cq = Cq::new(64);
            let mut init = QpInit::new(pd, &cq);
            init.recvs = vec![recv(200, inbox, 0, 64), recv(201, inbox, 64, 64)];
            let (qp, private) = engine
                .connect(server_addr, init, b"")
                .await
                .expect("connect");
            let theirs = RemoteBuf::decode(&private).unwrap();
            // A local failure drains only the send queue.
            qp.set_drain_on_local_failure(true);
            let bogus = STag::from_u32(0x00ab_cd00);
            qp.post_send(wr(1, SendOp::LocalInvalidate { stag: bogus }))
                .unwrap();
            qp.post_send(wr(2, send(&b"flushed"[..]))).unwrap();
            assert_eq!(next_wc(&cq).await.wc.status, WcStatus::LocalProtection);
            assert_eq!(next_wc(&cq).await.wc.status, WcStatus::Flushed);
            assert!(qp.send_queue_drained());
            qp.resume_send_queue();
            // Register and advertise in one request.
            let frmr = tpt.alloc_fast_reg(pd, 4096).unwrap();
            let reg = rdmap::FastReg {
                stag: frmr.with_instance(frmr.instance().wrapping_add(1)),
                to: 0,
                len: 4096,
                access: ALL,
            };
            let advert = RemoteBuf {
                stag: reg.stag,
                to: 0,
                len: 4096,
            };
            let data = Payload::Bytes(Bytes::copy_from_slice(&advert.encode()));
            qp.post_send(wr(3, SendOp::RegisterSend { reg, data }))
                .unwrap();
            assert_eq!(next_ok(&cq).await.wc.opcode, WcOpcode::Send);
            // The server wrote into it, then gave it back.
            let wc = next_ok(&cq).await;
            assert_eq!((wc.wc.wr_id, wc.wc.invalidated), (200, Some(reg.stag)));
            // A Send held behind a Delay.
            let t0 = Instant::now();
            qp.post_send(wr(4, SendOp::Delay { duration: DELAY }))
                .unwrap();
            qp.post_send(wr(5, send(&b"after delay"[..]))).unwrap();
            assert_eq!(next_ok(&cq).await.wc.opcode, WcOpcode::Delay);
            assert_eq!(next_ok(&cq).await.wc.wr_id, 5);
            assert!(t0.elapsed() >= DELAY);
            // The server refuses RDMA now: this Write ends the connection.
            assert_eq!(next_ok(&cq).await.wc.wr_id, 201);
            qp.post_send(wr(6, write(&b"refused"[..], theirs))).unwrap();
            qp.closed().await
        })
    });
    assert_eq!(
        client.join(),
        QpEnd::TerminatedByPeer(TermCode::ACCESS_RIGHTS)
    );
    assert_eq!(server.join(), QpEnd::Terminated(TermCode::ACCESS_RIGHTS));
}

/// Live migration across the veth (seed 003 §3.1): host a moves its protection domain,
/// with the region the client writes and reads and the connected queue pair, between two
/// engines ten times while host b runs a verified Write/Read/Send loop against it and
/// host a answers every message. Host b sees one connection, no Terminate, every byte.
#[test]
fn a_domain_migrates_ten_times_while_the_peer_loops_across_the_veth() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use shm::Region;

    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();
    const ROUNDS: u64 = 300;
    const SLOTS: u64 = 4;
    const SLOT: u32 = 64;
    const SIZES: [usize; 4] = [64, 5000, 300 << 10, 1];
    const STOP: u64 = u64::MAX;
    let message = |n: u64| {
        let mut m = n.to_be_bytes().to_vec();
        m.extend(pattern(n, SLOT as usize - 8));
        m
    };

    let server = net.a().spawn(move || {
        limit(async move {
            let (a, b) = (
                Engine::new(EngineConfig::default()),
                Engine::new(EngineConfig::default()),
            );
            let listener = a.listen(server_addr).await.expect("listen");
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.expect("a connection request");
            let pd = a.alloc_pd();
            let region = a
                .tpt()
                .alloc_region(pd, 2 << 20, Base::ZeroBased, ALL)
                .unwrap();
            // The inbox is read in place, wherever the domain is.
            let inbox = Arc::new(Region::alloc((SLOTS * u64::from(SLOT)) as usize).unwrap());
            let istag = a
                .tpt()
                .register_region(pd, inbox.clone(), Base::ZeroBased, LOCAL)
                .unwrap();
            let cq = Cq::new(64);
            let mut init = QpInit::new(pd, &cq);
            init.recvs = (0..SLOTS)
                .map(|i| recv(i, istag, i * u64::from(SLOT), SLOT))
                .collect();
            let advert = RemoteBuf {
                stag: region,
                to: 0,
                len: 2 << 20,
            };
            let qp = inc.accept(init, &advert.encode()).await.expect("accept");
            let answered = Arc::new(AtomicU64::new(0));
            let answering = {
                let (qp, answered) = (qp.clone(), answered.clone());
                tokio::spawn(async move {
                    let mut n = 0;
                    loop {
                        let wc = next_ok(&cq).await.wc;
                        if wc.opcode == WcOpcode::Send {
                            continue;
                        }
                        let slot = wc.wr_id;
                        let mut got = vec![0; SLOT as usize];
                        inbox
                            .read_at((slot * u64::from(SLOT)) as usize, &mut got)
                            .unwrap();
                        if got[..8] == STOP.to_be_bytes() {
                            return n;
                        }
                        assert!(got == message(n), "message {n} lost, doubled or reordered");
                        qp.post_recv(recv(slot, istag, slot * u64::from(SLOT), SLOT))
                            .unwrap();
                        qp.post_send(wr(n, send(message(n ^ 1 << 40)))).unwrap();
                        n += 1;
                        answered.store(n, Ordering::Relaxed);
                    }
                })
            };
            for i in 0..10 {
                let at = answered.load(Ordering::Relaxed);
                while answered.load(Ordering::Relaxed) < at + 3 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                let moved = from.migrate_pd(pd, to).await.expect("migrate");
                assert_eq!((moved.queue_pairs, moved.memory_entries), (1, 2));
                assert_eq!((from.qps().len(), to.qps().len()), (0, 1));
            }
            let n = answering.await.unwrap();
            // The client closes once its last message went: an orderly end, no Terminate.
            assert_eq!(qp.closed().await, QpEnd::Closed);
            let st = qp.stats();
            assert_eq!((st.terminates_sent, st.terminates_received), (0, 0));
            assert_eq!(a.stats().connections + b.stats().connections, 1);
            n
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let engine = Engine::new(EngineConfig::default());
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let sink = tpt.alloc_region(pd, 2 << 20, Base::ZeroBased, ALL).unwrap();
            let answer = tpt
                .alloc_region(pd, SLOT as usize, Base::ZeroBased, LOCAL)
                .unwrap();
            let cq = Cq::new(64);
            let (qp, private) = engine
                .connect(server_addr, QpInit::new(pd, &cq), b"")
                .await
                .expect("connect");
            let theirs = RemoteBuf::decode(&private).unwrap();
            for n in 0..ROUNDS {
                let len = SIZES[n as usize % SIZES.len()];
                let dst = theirs.slice(((n * 4096) % (1 << 20)) as u32, len as u32);
                let data = pattern(n, len);
                qp.post_send(wr(1, write(data.clone(), dst))).unwrap();
                next_ok(&cq).await;
                let read = SendOp::Read {
                    src: dst,
                    dst: Sge {
                        stag: sink,
                        to: 0,
                        len: len as u32,
                    },
                };
                qp.post_send(wr(2, read)).unwrap();
                next_ok(&cq).await;
                assert!(
                    read_mem(&engine, pd, sink, 0, len) == data,
                    "Read {n} differs"
                );
                qp.post_recv(recv(3, answer, 0, SLOT)).unwrap();
                qp.post_send(wr(4, send(message(n)))).unwrap();
                let mut got = [next_ok(&cq).await.wc.wr_id, next_ok(&cq).await.wc.wr_id];
                got.sort_unstable();
                assert_eq!(got, [3, 4]);
                assert_eq!(
                    read_mem(&engine, pd, answer, 0, SLOT as usize),
                    message(n ^ 1 << 40)
                );
            }
            let mut stop = STOP.to_be_bytes().to_vec();
            stop.resize(SLOT as usize, 0);
            qp.post_send(wr(5, send(stop))).unwrap();
            next_ok(&cq).await;
            let st = qp.stats();
            assert_eq!((st.terminates_sent, st.terminates_received), (0, 0));
            assert_eq!(qp.state(), QpState::Rts);
            assert_eq!(engine.stats().connections, 1);
            qp.disconnect();
            qp.closed().await
        })
    });
    assert_eq!(client.join(), QpEnd::Closed);
    let answered = server.join();
    assert_eq!(answered, ROUNDS, "every message answered once");
    report(format_args!(
        "migration across the veth: {ROUNDS} verified rounds, 10 moves, 1 connection"
    ));
}

/// Pipelined registration across the veth (seed 003 §3.4): host b queues the registration
/// of 1 MiB and at once posts a Write from it and a Send behind it; both go once the
/// (delayed) registration is done, in order, and host a finds the octets in place when the
/// Send arrives.
#[test]
fn a_write_from_a_region_still_being_registered_waits_across_the_veth() {
    use std::sync::Arc;

    use shm::Region;

    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();
    const LEN: usize = 1 << 20;
    const DELAY: Duration = Duration::from_millis(200);

    let server = net.a().spawn(move || {
        limit(async move {
            let engine = Engine::new(EngineConfig::default());
            let listener = engine.listen(server_addr).await.expect("listen");
            ready_tx.send(()).unwrap();
            let inc = listener.accept().await.expect("a connection request");
            let pd = engine.alloc_pd();
            let tpt = engine.tpt();
            let region = tpt.alloc_region(pd, LEN, Base::ZeroBased, ALL).unwrap();
            let inbox = tpt.alloc_region(pd, 64, Base::ZeroBased, LOCAL).unwrap();
            let cq = Cq::new(64);
            let mut init = QpInit::new(pd, &cq);
            init.recvs = vec![recv(1, inbox, 0, 64)];
            let advert = RemoteBuf {
                stag: region,
                to: 0,
                len: LEN as u32,
            };
            let qp = inc.accept(init, &advert.encode()).await.expect("accept");
            assert_eq!(next_ok(&cq).await.wc.wr_id, 1);
            assert!(read_mem(&engine, pd, region, 0, LEN) == pattern(7, LEN));
            qp.closed().await
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let mut cfg = EngineConfig::default();
            cfg.registration_delay = DELAY;
            let engine = Engine::new(cfg);
            let pd = engine.alloc_pd();
            let cq = Cq::new(64);
            let (qp, private) = engine
                .connect(server_addr, QpInit::new(pd, &cq), b"")
                .await
                .expect("connect");
            let theirs = RemoteBuf::decode(&private).unwrap();
            let memory = Arc::new(Region::alloc(LEN).unwrap());
            memory.write_at(0, &pattern(7, LEN)).unwrap();
            let t0 = Instant::now();
            let stag = engine
                .register_queued(pd, memory, Base::ZeroBased, ALL)
                .unwrap();
            let from = Payload::Sgl(
                [Sge {
                    stag,
                    to: 0,
                    len: LEN as u32,
                }]
                .into(),
            );
            qp.post_send(wr(
                1,
                SendOp::Write {
                    data: from,
                    dst: theirs,
                },
            ))
            .unwrap();
            qp.post_send(wr(2, send(&b"done"[..]))).unwrap();
            assert_eq!(next_ok(&cq).await.wc.wr_id, 1);
            assert!(
                t0.elapsed() >= DELAY,
                "the Write waited for its registration"
            );
            assert_eq!(next_ok(&cq).await.wc.wr_id, 2);
            qp.disconnect();
            qp.closed().await
        })
    });
    assert_eq!(client.join(), QpEnd::Closed);
    assert_eq!(server.join(), QpEnd::Closed);
}

/// An `iwarpd` process in network namespace `ns`; killed on drop.
struct NsDaemon {
    child: std::process::Child,
    addr: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl NsDaemon {
    fn start(bin: &std::path::Path, ns: &str, args: &[&str]) -> Self {
        use std::io::{BufRead as _, Read as _};
        let mut child = std::process::Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(bin)
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start iwarpd");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (mut pipe, sink) = (child.stderr.take().unwrap(), log.clone());
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = pipe.read_to_string(&mut s);
            sink.lock().unwrap().push_str(&s);
        });
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read stdout");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("iwarpd's first line: {line:?}"))
            .to_owned();
        Self {
            child,
            addr,
            log,
            reader: Some(reader),
        }
    }

    /// Waits for it to exit; its status and its whole log (the log thread ends at the
    /// pipe's end, after the process's last line).
    fn exit(mut self) -> (std::process::ExitStatus, String) {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                let reader = self.reader.take().expect("exit runs once");
                while !reader.is_finished() {
                    assert!(start.elapsed() < WAIT, "iwarpd's stderr stayed open");
                    std::thread::sleep(Duration::from_millis(5));
                }
                reader.join().expect("the log thread");
                return (st, self.log.lock().unwrap().clone());
            }
            assert!(start.elapsed() < WAIT, "iwarpd did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for NsDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Seed 003 §3.1 between processes, across the veth: ten times a new `iwarpd` process on
/// host A takes the listening socket and the connection over from the running one
/// (`--take-over`/`--handover`), while host B runs a verified loop of Writes, Reads and
/// echoed Sends on one connection: every round verified, one connection, no Terminate.
#[test]
fn iwarpd_is_upgraded_ten_times_while_the_peer_loops_across_the_veth() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let bin = tests::binary("iwarpd", "iwarpd");
    let dir = std::env::temp_dir().join(format!("iwarpd-upgrade-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("handover.sock").to_str().unwrap().to_owned();
    let listen = SocketAddr::from((net.a().addr(), PORT)).to_string();
    let ns = net.a().name().to_owned();
    let mut daemon = NsDaemon::start(
        &bin,
        &ns,
        &["--listen", &listen, "--handover", &path, "--control", "off"],
    );
    let addr: SocketAddr = daemon.addr.parse().unwrap();

    let (stop, rounds) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let client = {
        let (stop, rounds) = (stop.clone(), rounds.clone());
        net.b().spawn(move || {
            limit(async move {
                let engine = Engine::new(EngineConfig::default());
                let pd = engine.alloc_pd();
                let cq = Cq::new(64);
                let sink = engine
                    .tpt()
                    .alloc_region(pd, 512 << 10, Base::ZeroBased, LOCAL)
                    .unwrap();
                let inbox = engine
                    .tpt()
                    .alloc_region(pd, 64 << 10, Base::ZeroBased, LOCAL)
                    .unwrap();
                let (qp, private) = engine
                    .connect(addr, QpInit::new(pd, &cq), b"")
                    .await
                    .expect("connect to iwarpd");
                let remote = RemoteBuf::decode(&private[..16]).unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let len = [1usize, 100, 4096, 65_537, 300 << 10][n as usize % 5];
                    let to = (n * 8192) % (u64::from(remote.len) - (300 << 10));
                    let data = pattern(n, len);
                    let dst = RemoteBuf {
                        stag: remote.stag,
                        to,
                        len: len as u32,
                    };
                    qp.post_send(wr(n, write(data.clone(), dst))).unwrap();
                    next_ok(&cq).await;
                    let read = SendOp::Read {
                        src: dst,
                        dst: Sge {
                            stag: sink,
                            to: 0,
                            len: len as u32,
                        },
                    };
                    qp.post_send(wr(n, read)).unwrap();
                    next_ok(&cq).await;
                    assert!(
                        read_mem(&engine, pd, sink, 0, len) == data,
                        "round {n}: Read"
                    );
                    let msg = [&n.to_be_bytes()[..], &pattern(!n, len % 60_000)].concat();
                    qp.post_recv(recv(n, inbox, 0, 64 << 10)).unwrap();
                    qp.post_send(wr(n, send(msg.clone()))).unwrap();
                    let mut echoed = 0;
                    for _ in 0..2 {
                        let wc = next_ok(&cq).await;
                        if wc.wc.opcode == WcOpcode::Recv {
                            echoed = wc.wc.byte_len as usize;
                        }
                    }
                    assert_eq!(echoed, msg.len(), "round {n}: echo length");
                    assert!(
                        read_mem(&engine, pd, inbox, 0, msg.len()) == msg,
                        "round {n}: echo"
                    );
                    n += 1;
                    rounds.store(n, Ordering::Relaxed);
                }
                assert_eq!(qp.state(), QpState::Rts);
                assert_eq!(qp.stats().terminates_received, 0);
                engine.stats().connections
            })
        })
    };
    let progress = |k: &str| {
        let before = rounds.load(Ordering::Relaxed);
        let start = Instant::now();
        while rounds.load(Ordering::Relaxed) < before + 5 {
            assert!(!client.is_finished(), "the client's loop failed {k}");
            assert!(start.elapsed() < WAIT, "the client made no progress {k}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    for k in 0..10 {
        progress(&format!("before upgrade {k}"));
        let next = NsDaemon::start(
            &bin,
            &ns,
            &[
                "--take-over",
                &path,
                "--handover",
                &path,
                "--control",
                "off",
            ],
        );
        assert_eq!(next.addr, daemon.addr);
        let (status, log) = std::mem::replace(&mut daemon, next).exit();
        assert!(
            status.success(),
            "upgrade {k}: the daemon before exited {status}:\n{log}"
        );
        assert!(
            log.contains("handed over to a successor connections=1"),
            "{log}"
        );
    }
    progress("after the last upgrade");
    stop.store(true, Ordering::Relaxed);
    let connections = client.join();
    assert_eq!(connections, 1, "no reconnect");
    report(format_args!(
        "{} verified rounds across 10 iwarpd upgrades over the veth",
        rounds.load(Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Seed 003's shared send queue and seed 001's one-touch windows across the veth, through
/// `verbs`: host b drives three connections to host a from one shared send queue, Writes
/// through a type 1 and a type 2 one-touch window among numbered Sends. Each window takes
/// one Write message; the second Write through the type 1 window ends that connection with
/// a Terminate and places nothing, while the Sends on the third connection go on and
/// arrive in posting order, and completions come in posting order.
#[test]
fn a_shared_send_queue_and_one_touch_windows_across_the_veth() {
    use verbs::{Device, DeviceConfig, MwType, QpConfig, SharedSendQueue};
    let Some(net) = two_hosts_or_skip() else {
        return;
    };
    let server_addr = SocketAddr::from((net.a().addr(), PORT));
    let (ready_tx, ready_rx) = oneshot::channel();
    let send_wr = |wr_id: u64, data: Vec<u8>| SendWr {
        wr_id,
        op: send(data),
        flags: SendFlags::NONE,
    };

    let server = net.a().spawn(move || {
        limit(async move {
            let dev = Device::open(DeviceConfig::default().embedded()).expect("open the device");
            let pd = dev.alloc_pd().unwrap();
            let region = pd.alloc_mr(8192, ALL | Access::BIND).unwrap();
            let mw1 = pd.alloc_mw(MwType::One).unwrap();
            mw1.set_one_touch(true);
            let once = mw1.bind(&region, ..4096, Access::REMOTE_WRITE).unwrap();
            let listener = dev.listen(server_addr).await.unwrap();
            ready_tx.send(()).unwrap();
            let cq = dev.create_cq(64);
            let inbox = pd.alloc_mr(16 * 8, LOCAL).unwrap();
            let mut qps = Vec::new();
            for c in 0..3 {
                let mut cfg = QpConfig::new(&cq);
                if c == 1 {
                    cfg = cfg.recv(RecvWr {
                        wr_id: 15,
                        sgl: [inbox.local(15 * 8..16 * 8)].into(),
                    });
                }
                if c == 2 {
                    for k in 0..8usize {
                        cfg = cfg.recv(RecvWr {
                            wr_id: k as u64,
                            sgl: [inbox.local(k * 8..k * 8 + 8)].into(),
                        });
                    }
                }
                let inc = listener.accept().await.unwrap();
                qps.push(inc.accept(&pd, cfg, &once.encode()).await.unwrap());
            }
            // The client's hello on connection 1, then the type 2 window, bound on
            // connection 1 and advertised there.
            let hello = tokio::time::timeout(WAIT, cq.next())
                .await
                .unwrap()
                .unwrap();
            assert_eq!((hello.wc.wr_id, hello.wc.byte_len), (15, 5), "{hello:?}");
            let mw2 = pd.alloc_mw(MwType::Two).unwrap();
            mw2.set_one_touch(true);
            let once2 = qps[1]
                .bind_mw(&mw2, &region, 4096.., Access::REMOTE_WRITE)
                .await
                .unwrap();
            qps[1]
                .send(Bytes::from(once2.encode().to_vec()))
                .await
                .unwrap();
            // Connection 2's Sends, in posting order.
            let mut got = Vec::new();
            while got.len() < 8 {
                let wc = tokio::time::timeout(WAIT, cq.next())
                    .await
                    .unwrap()
                    .unwrap();
                if wc.wc.opcode == WcOpcode::Recv {
                    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
                    let k = wc.wc.wr_id as usize;
                    let v = inbox.read(k * 8..k * 8 + 8).unwrap();
                    got.push(u64::from_le_bytes(v.try_into().unwrap()));
                }
            }
            assert_eq!(got, [3, 4, 5, 6, 7, 8, 11, 12], "posting order");
            let end0 = tokio::time::timeout(WAIT, qps[0].closed()).await.unwrap();
            assert!(matches!(end0, QpEnd::Terminated(_)), "{end0:?}");
            assert_eq!(
                region.read(..).unwrap(),
                [pattern(1, 4096), pattern(2, 4096)].concat(),
                "each window took its first Write and nothing of the second"
            );
        })
    });

    let client = net.b().spawn(move || {
        limit(async move {
            ready_rx.await.unwrap();
            let dev = Device::open(DeviceConfig::default().embedded()).expect("open the device");
            let pd = dev.alloc_pd().unwrap();
            let cq = dev.create_cq(64);
            let inbox = pd.alloc_mr(64, LOCAL).unwrap();
            let mut conns = Vec::new();
            for c in 0..3 {
                let mut cfg = QpConfig::new(&cq);
                if c == 1 {
                    cfg = cfg.recv(RecvWr {
                        wr_id: 0,
                        sgl: [inbox.local(..)].into(),
                    });
                }
                conns.push(dev.connect(&pd, server_addr, cfg, b"").await.unwrap());
            }
            let once = RemoteBuf::decode(&conns[0].private_data).unwrap();
            // The initiator's first FPDU, before which the responder sends nothing
            // (RFC 5044): connection 1 is the one the server answers on.
            conns[1]
                .qp
                .send(Bytes::from_static(b"hello"))
                .await
                .unwrap();
            let wc = tokio::time::timeout(WAIT, cq.next())
                .await
                .unwrap()
                .unwrap();
            let once2 = RemoteBuf::decode(&inbox.read(..wc.wc.byte_len as usize).unwrap()).unwrap();
            let qps: Vec<_> = conns.into_iter().map(|c| c.qp).collect();
            let ssq = SharedSendQueue::new(32);
            let write = |wr_id, seed, dst| SendWr {
                wr_id,
                op: SendOp::Write {
                    data: Payload::Bytes(Bytes::from(pattern(seed, 4096))),
                    dst,
                },
                flags: SendFlags::NONE,
            };
            ssq.post(&qps[0], write(1, 1, once)).unwrap();
            ssq.post(&qps[1], write(2, 2, once2)).unwrap();
            for id in 3..=8u64 {
                ssq.post(&qps[2], send_wr(id, id.to_le_bytes().to_vec()))
                    .unwrap();
            }
            // A second Write through the used-up type 1 window.
            ssq.post(&qps[0], write(9, 9, once)).unwrap();
            let end0 = tokio::time::timeout(WAIT, qps[0].closed()).await.unwrap();
            assert!(matches!(end0, QpEnd::TerminatedByPeer(_)), "{end0:?}");
            for id in 11..=12u64 {
                ssq.post(&qps[2], send_wr(id, id.to_le_bytes().to_vec()))
                    .unwrap();
            }
            let mut order = Vec::new();
            while let Some(c) = ssq.next().await {
                if c.wc.wr_id != 9 {
                    assert_eq!(c.wc.status, WcStatus::Success, "{c:?}");
                }
                order.push(c.wc.wr_id);
            }
            assert_eq!(order, [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12], "posting order");
            qps[2].state()
        })
    });
    assert_eq!(client.join(), QpState::Rts);
    server.join();
}
