//! The async per-request methods of `Qp` over loopback: each one, SGL Send/Recv, and the
//! exchange of a `RemoteBuf` in private data.

mod common;

use bytes::Bytes;
use common::{ALL, Host, connect, pair, pattern};
use verbs::{Access, DeviceConfig, RemoteBuf, WcOpcode};

#[tokio::test]
async fn remote_buf_in_private_data_then_write_and_read() {
    let server = Host::new(DeviceConfig::default());
    let target = server
        .pd
        .register_va(vec![0; 8192], 0x7f00_0000, ALL)
        .unwrap();
    let advert = target.remote_slice(4096..).encode();
    let client = Host::new(DeviceConfig::default());
    let (c, s) = connect(&client, &server, b"who", &advert).await;
    assert_eq!(&s.peer_data[..], b"who");
    let remote = RemoteBuf::decode(&c.peer_data).expect("16 octets");
    assert_eq!(
        remote,
        RemoteBuf {
            stag: target.stag(),
            to: 0x7f00_1000,
            len: 4096
        }
    );

    let data = pattern(4096, 3);
    let wc = c.qp.write(Bytes::from(data.clone()), remote).await.unwrap();
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Write, 4096));
    let sink = c.pd().alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let wc = c.qp.read(remote, &sink).await.unwrap();
    assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Read, 4096));
    assert_eq!(sink.read(..).unwrap(), data);
    assert_eq!(
        target.read(4096..).unwrap(),
        data,
        "landed at the VA offset"
    );
    assert_eq!(
        target.read(..4096).unwrap(),
        vec![0; 4096],
        "nothing before it"
    );
    assert!(
        c.cq().is_empty() && s.cq().is_empty(),
        "nothing went to the CQs"
    );
}

#[tokio::test]
async fn send_and_recv_futures() {
    let (c, s) = pair().await;
    let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    // `join!` polls the receive first, so it is posted before the Send goes out.
    let (got, sent) = tokio::join!(
        s.qp.recv(inbox.local(8..)),
        c.qp.send(Bytes::from_static(b"ping"))
    );
    let sent = sent.unwrap();
    assert_eq!((sent.opcode, sent.byte_len), (WcOpcode::Send, 4));
    let got = got.unwrap();
    assert_eq!((got.opcode, got.byte_len), (WcOpcode::Recv, 4));
    assert_eq!(got.invalidated, None);
    assert_eq!(inbox.read(8..12).unwrap(), b"ping");

    let (got, _) = tokio::join!(s.qp.recv(&inbox), c.qp.send_immediate(0x1122_3344));
    let got = got.unwrap();
    assert_eq!(
        (got.opcode, got.immediate),
        (WcOpcode::RecvImmediate, Some(0x1122_3344))
    );
    assert!(c.cq().is_empty() && s.cq().is_empty());
}

#[tokio::test]
async fn gather_send_scatter_recv() {
    let (c, s) = pair().await;
    let a = c.pd().register(pattern(300, 1), Access::NONE).unwrap();
    let b = c.pd().register(pattern(500, 2), Access::NONE).unwrap();
    let x = s.pd().alloc_mr(100, Access::LOCAL_WRITE).unwrap();
    let y = s.pd().alloc_mr(1000, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(
        s.qp.recv_sgl(vec![x.local(..), y.local(..)]),
        c.qp.send_sgl(vec![a.local(100..), b.local(..)])
    );
    assert_eq!(sent.unwrap().byte_len, 700);
    assert_eq!(got.unwrap().byte_len, 700);
    let mut expect = a.read(100..).unwrap();
    expect.extend(b.read(..).unwrap());
    let mut placed = x.read(..).unwrap();
    placed.extend(y.read(..600).unwrap());
    assert_eq!(placed, expect, "gathered in order, scattered in order");
    assert_eq!(y.read(600..).unwrap(), vec![0; 400]);
}

#[tokio::test]
async fn atomics_return_the_original_value() {
    let server = Host::new(DeviceConfig::default());
    let counter = server.pd.alloc_mr(16, ALL).unwrap();
    counter.write(8, &40u64.to_le_bytes()).unwrap();
    let (c, _s) = connect(
        &Host::new(DeviceConfig::default()),
        &server,
        b"",
        &counter.remote().encode(),
    )
    .await;
    let remote = RemoteBuf::decode(&c.peer_data).unwrap().slice(8, 8);
    assert_eq!(c.qp.fetch_add(remote, 2).await.unwrap(), 40);
    assert_eq!(c.qp.fetch_add(remote, 5).await.unwrap(), 42);
    assert_eq!(c.qp.cmp_swap(remote, 1, 99).await.unwrap(), 47, "no swap");
    assert_eq!(c.qp.cmp_swap(remote, 47, 7).await.unwrap(), 47, "swapped");
    assert_eq!(counter.read(8..).unwrap(), 7u64.to_le_bytes());
}

#[tokio::test]
async fn sugar_and_cq_requests_mix_in_order() {
    let (c, s) = pair().await;
    let target = s.pd().alloc_mr(1 << 16, ALL).unwrap();
    // A raw, signaled Write goes to the CQ; the future's Read completes after it.
    c.qp.post_send(verbs::SendWr {
        wr_id: 5,
        op: verbs::SendOp::Write {
            data: verbs::Payload::Bytes(Bytes::from(pattern(1 << 16, 9))),
            dst: target.remote(),
        },
        flags: verbs::SendFlags::SIGNALED,
    })
    .unwrap();
    let sink = c.pd().alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    c.qp.read(target.remote(), &sink).await.unwrap();
    let wc = c.cq().next().await.unwrap();
    assert_eq!((wc.qp, wc.wc.wr_id), (c.qp.num(), 5));
    assert!(
        c.cq().is_empty(),
        "the Read's completion went to its future"
    );
    assert_eq!(sink.read(..).unwrap(), pattern(1 << 16, 9));
}

/// A dropped per-request future does not cancel its request, and its completion goes
/// nowhere (not to the CQ); many requests in sequence reuse the same slots.
#[tokio::test]
async fn a_dropped_future_still_runs_and_its_completion_is_discarded() {
    let (c, s) = pair().await;
    let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let recv = s.qp.recv(inbox.local(..4));
    let mut recv = Box::pin(recv);
    // Polled once (posted), then dropped before the Send arrives.
    assert!(futures::poll!(recv.as_mut()).is_pending());
    drop(recv);
    c.qp.send(Bytes::from_static(b"lost")).await.unwrap();
    // The next receive sees the next message: the first one landed in the dropped one.
    let (got, _) = tokio::join!(s.qp.recv(inbox.local(8..12)), async {
        c.qp.send(Bytes::from_static(b"seen")).await.unwrap()
    });
    assert_eq!(got.unwrap().byte_len, 4);
    assert_eq!(inbox.read(..4).unwrap(), b"lost", "the dropped receive ran");
    assert_eq!(inbox.read(8..12).unwrap(), b"seen");
    assert!(
        s.cq().is_empty() && c.cq().is_empty(),
        "nothing went to a CQ"
    );
    for i in 0..1000u32 {
        // `join!` polls the receive first, so it is posted before the Send goes out.
        let (got, sent) = tokio::join!(
            s.qp.recv(inbox.local(..4)),
            c.qp.send(Bytes::copy_from_slice(&i.to_be_bytes()))
        );
        sent.unwrap_or_else(|e| panic!("send {i}: {e}"));
        assert_eq!(got.unwrap().byte_len, 4);
    }
}
