//! Connection lifetime through the API: disconnect, last-handle drop, device shutdown,
//! shared receive queues.

mod common;

use bytes::Bytes;
use common::{Host, pair};
use verbs::{Access, DeviceConfig, QpConfig, QpEnd, QpState, RecvWr};

#[tokio::test]
async fn disconnect_ends_both_sides_gracefully() {
    let (c, s) = pair().await;
    assert_eq!((c.qp.state(), s.qp.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(c.qp.ird_ord(), (16, 16));
    c.qp.disconnect();
    assert_eq!(c.qp.closed().await, QpEnd::Closed);
    assert_eq!(s.qp.closed().await, QpEnd::Closed);
}

/// CRC is on when either side asks for it, and each queue pair says what is in force.
#[tokio::test]
async fn each_side_says_whether_crc_is_in_force() {
    for (client, server, on) in [
        (false, false, false),
        (false, true, true),
        (true, false, true),
    ] {
        let (c, s) = common::connect(
            &Host::new(DeviceConfig::default().crc(client)),
            &Host::new(DeviceConfig::default().crc(server)),
            b"",
            b"",
        )
        .await;
        for qp in [&c.qp, &s.qp] {
            let f = qp.framing();
            assert_eq!((f.crc, f.markers_tx, f.markers_rx), (on, false, false));
        }
    }
    // Markers asked by the client only: the server inserts them, the client reads them.
    let (c, s) = common::connect(
        &Host::new(DeviceConfig::default().markers(true)),
        &Host::new(DeviceConfig::default()),
        b"",
        b"",
    )
    .await;
    assert_eq!(c.qp.framing().to_string(), "CRC on, markers from the peer");
    assert_eq!(s.qp.framing().to_string(), "CRC on, markers to the peer");
}

#[tokio::test]
async fn dropping_the_last_handle_disconnects() {
    let (c, s) = pair().await;
    let clone = c.qp.clone();
    drop(c.qp);
    assert_eq!(clone.state(), QpState::Rts, "a clone keeps it open");
    drop(clone);
    assert_eq!(s.qp.closed().await, QpEnd::Closed);
}

#[tokio::test]
async fn device_shutdown_closes_every_queue_pair() {
    let (c, s) = pair().await;
    c.host.device.shutdown().await;
    assert_eq!(c.qp.closed().await, QpEnd::Closed);
    assert_eq!(s.qp.closed().await, QpEnd::Closed);
}

#[tokio::test]
async fn shared_receive_queue_feeds_queue_pairs() {
    let server = Host::new(DeviceConfig::default());
    let srq = server.device.create_srq(16).unwrap();
    let inbox = server.pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    srq.post_recv(RecvWr {
        wr_id: 1,
        sgl: [inbox.local(..32)].into(),
    })
    .unwrap();
    srq.post_recv(RecvWr {
        wr_id: 2,
        sgl: [inbox.local(32..)].into(),
    })
    .unwrap();
    let listener = server
        .device
        .listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr();
    let accepting = {
        let (pd, cq, srq) = (server.pd.clone(), server.cq.clone(), srq.clone());
        tokio::spawn(async move {
            let mut qps = Vec::new();
            for _ in 0..2 {
                let inc = listener.accept().await.unwrap();
                let cfg = QpConfig::new(&cq).srq(&srq);
                qps.push(inc.accept(&pd, cfg, b"").await.unwrap());
            }
            qps
        })
    };
    let client = Host::new(DeviceConfig::default());
    let mut clients = Vec::new();
    for _ in 0..2 {
        let conn = client
            .device
            .connect(&client.pd, addr, QpConfig::new(&client.cq), b"")
            .await
            .unwrap();
        clients.push(conn.qp);
    }
    let _servers = accepting.await.unwrap();
    clients[0].send(Bytes::from_static(b"first")).await.unwrap();
    clients[1]
        .send(Bytes::from_static(b"second"))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..2 {
        let wc = server.cq.next().await.unwrap();
        assert!(wc.wc.is_ok(), "{wc:?}");
        got.push((wc.wc.wr_id, wc.wc.byte_len));
    }
    got.sort_unstable();
    assert_eq!(got.len(), 2);
    assert!(srq.is_empty(), "both buffers taken");
    let texts = [inbox.read(..32).unwrap(), inbox.read(32..).unwrap()];
    for (id, len) in got {
        let text = &texts[(id - 1) as usize][..len as usize];
        assert!(text == b"first" || text == b"second", "{text:?}");
    }
}

#[tokio::test]
async fn host_names_resolve_for_listen_and_connect() {
    let (server, client) = (
        Host::new(DeviceConfig::default()),
        Host::new(DeviceConfig::default()),
    );
    let listener = server.device.listen("localhost:0").await.unwrap();
    let port = listener.local_addr().port();
    let (spd, scq) = (server.pd.clone(), server.cq.clone());
    let accepting = tokio::spawn(async move {
        let inc = listener.accept().await.unwrap();
        inc.accept(&spd, QpConfig::new(&scq), b"").await.unwrap()
    });
    let conn = client
        .device
        .connect(
            &client.pd,
            format!("localhost:{port}"),
            QpConfig::new(&client.cq),
            b"hi",
        )
        .await
        .unwrap();
    let sqp = accepting.await.unwrap();
    assert_eq!(conn.qp.state(), QpState::Rts);
    assert_eq!(client.device.stats().queue_pairs, 1);
    assert_eq!(conn.qp.stats().traffic.fpdus_sent, 0);
    conn.qp.disconnect();
    assert_eq!(sqp.closed().await, QpEnd::Closed);
}
