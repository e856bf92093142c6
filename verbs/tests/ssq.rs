//! The shared send queue (seed 003 §3.5): per-connection wire order is posting order,
//! completions come in posting order across connections, a failed connection flushes
//! only its own requests, and the depth bounds them all.

mod common;

use std::time::Instant;

use bytes::Bytes;
use common::{ALL, Host, Side, connect, pattern};
use verbs::{
    Access, DeviceConfig, Payload, PostError, SendFlags, SendOp, SendWr, SharedSendQueue, WcOpcode,
    WcStatus,
};

fn send(wr_id: u64, data: Vec<u8>) -> SendWr {
    SendWr {
        wr_id,
        op: SendOp::Send {
            data: Payload::Bytes(Bytes::from(data)),
            invalidate: None,
            immediate: None,
        },
        flags: SendFlags::NONE,
    }
}

/// Three connections from one client device, each to a server device of its own (with
/// its own completion queue).
async fn three() -> Vec<(Side, Side)> {
    let client = Host::new(DeviceConfig::default());
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let server = Host::new(DeviceConfig::default());
        pairs.push(connect(&client, &server, b"", b"").await);
    }
    pairs
}

#[tokio::test]
async fn completions_in_posting_order_and_each_connection_in_its_order() {
    let pairs = three().await;
    let ssq = SharedSendQueue::new(64);
    // Connection 0 reads 32 MiB first: it finishes long after the small Sends posted
    // behind it on connections 1 and 2.
    const BIG: usize = 32 << 20;
    let src = pairs[0].1.pd().alloc_mr(BIG, ALL).unwrap();
    src.write(0, &pattern(BIG, 3)).unwrap();
    let sink = pairs[0].0.pd().alloc_mr(BIG, Access::LOCAL_WRITE).unwrap();
    // Receives on the servers, posted before anything is sent, and when each arrived.
    let mut receivers = Vec::new();
    for (i, (_, s)) in pairs.iter().enumerate().skip(1) {
        let inbox = s.pd().alloc_mr(16 * 8, Access::LOCAL_WRITE).unwrap();
        for k in 0..8 {
            s.qp.post_recv(verbs::RecvWr {
                wr_id: k as u64,
                sgl: [inbox.local(k * 8..k * 8 + 8)].into(),
            })
            .unwrap();
        }
        let cq = s.cq().clone();
        receivers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..8 {
                let wc = cq.next().await.unwrap();
                assert_eq!(wc.wc.status, WcStatus::Success);
                let k = wc.wc.wr_id as usize;
                let v = inbox.read(k * 8..k * 8 + 8).unwrap();
                got.push((u64::from_le_bytes(v.try_into().unwrap()), Instant::now()));
            }
            (i, got)
        }));
    }
    ssq.post(
        &pairs[0].0.qp,
        SendWr {
            wr_id: 0,
            op: SendOp::Read {
                src: src.remote(),
                dst: sink.local(..),
            },
            flags: SendFlags::NONE,
        },
    )
    .unwrap();
    // Then 16 Sends interleaved over connections 1 and 2, each carrying its posting id.
    let mut order = vec![(0u64, pairs[0].0.qp.num())];
    for id in 1..=16u64 {
        let c = 1 + (id as usize * 7 % 5) % 2;
        let c = if order
            .iter()
            .filter(|(_, q)| *q == pairs[c].0.qp.num())
            .count()
            >= 8
        {
            3 - c
        } else {
            c
        };
        ssq.post(&pairs[c].0.qp, send(id, id.to_le_bytes().to_vec()))
            .unwrap();
        order.push((id, pairs[c].0.qp.num()));
    }
    let mut out = Vec::new();
    let mut read_done = None;
    while let Some(c) = ssq.next().await {
        assert_eq!(c.wc.status, WcStatus::Success, "{c:?}");
        if c.wc.wr_id == 0 {
            assert_eq!(c.wc.opcode, WcOpcode::Read);
            read_done = Some(Instant::now());
        }
        out.push((c.wc.wr_id, c.qp));
    }
    assert_eq!(out, order, "completions in posting order");
    assert_eq!(sink.read(..).unwrap(), pattern(BIG, 3));
    // Each connection received its Sends in posting order, and they arrived while the
    // Read was still under way: their completions were held back, not their sending.
    let read_done = read_done.unwrap();
    for r in receivers {
        let (i, got) = r.await.unwrap();
        let want: Vec<u64> = order
            .iter()
            .filter(|(_, q)| *q == pairs[i].0.qp.num())
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), want);
        assert!(got.iter().all(|(_, at)| *at < read_done));
    }
}

#[tokio::test]
async fn a_failed_connection_flushes_only_its_requests_and_the_depth_holds() {
    let pairs = three().await;
    let ssq = SharedSendQueue::new(6);
    let mut inboxes = Vec::new();
    for (_, s) in &pairs {
        let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        for k in 0..2u64 {
            s.qp.post_recv(verbs::RecvWr {
                wr_id: k,
                sgl: [inbox.local(k as usize * 8..k as usize * 8 + 8)].into(),
            })
            .unwrap();
        }
        inboxes.push(inbox);
    }
    // Connection 1 writes to an STag its peer does not have: its peer terminates, so
    // what follows on connection 1 is flushed; connections 0 and 2 carry on.
    let bad = verbs::RemoteBuf {
        stag: verbs::STag::from_u32(0x00ee_ee00),
        to: 0,
        len: 4,
    };
    ssq.post(&pairs[0].0.qp, send(1, b"zero".to_vec())).unwrap();
    ssq.post(
        &pairs[1].0.qp,
        SendWr {
            wr_id: 2,
            op: SendOp::Write {
                data: Payload::Bytes(Bytes::from_static(b"nope")),
                dst: bad,
            },
            flags: SendFlags::NONE,
        },
    )
    .unwrap();
    pairs[1].0.qp.closed().await;
    ssq.post(&pairs[1].0.qp, send(3, b"late".to_vec())).unwrap();
    ssq.post(&pairs[2].0.qp, send(4, b"two".to_vec())).unwrap();
    ssq.post(&pairs[0].0.qp, send(5, b"zero2".to_vec()))
        .unwrap();
    ssq.post(&pairs[2].0.qp, send(6, b"two2".to_vec())).unwrap();
    // Six outstanding: the seventh is refused.
    assert_eq!(
        ssq.post(&pairs[0].0.qp, send(7, b"full".to_vec())),
        Err(PostError::QueueFull)
    );
    let mut got = Vec::new();
    while let Some(c) = ssq.next().await {
        got.push((c.wc.wr_id, c.wc.status));
    }
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Flushed),
            (4, WcStatus::Success),
            (5, WcStatus::Success),
            (6, WcStatus::Success),
        ]
    );
    assert!(ssq.is_empty());
    // Connection 2's peer got both of its Sends, in order.
    for k in 0..2 {
        assert_eq!(pairs[2].1.cq().next().await.unwrap().wc.wr_id, k);
    }
    assert_eq!(inboxes[2].read(..3).unwrap(), b"two");
    assert_eq!(inboxes[2].read(8..12).unwrap(), b"two2");
}
