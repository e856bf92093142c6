//! Seed 004's loose ends through `verbs`: the Delay request, embedded and through iwarpd.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Host, connect};
use offload_engine::EngineConfig;
use verbs::{Access, DeviceConfig, WcOpcode};

/// Two queue pairs from `client` to `server`: a Delay on the first holds the Send behind
/// it for its time, while the second queue pair carries on.
async fn delay_holds_only_its_queue_pair(client: Host, server: Host) {
    const T: Duration = Duration::from_millis(1500);
    let (c1, s1) = connect(&client, &server, b"", b"").await;
    let (c2, s2) = connect(&client, &server, b"", b"").await;
    let (in1, in2) = (
        s1.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap(),
        s2.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap(),
    );
    let t0 = Instant::now();
    let (delay, late, got1, other) = tokio::join!(
        async {
            let wc = c1.qp.delay(T).await.unwrap();
            (wc, Instant::now())
        },
        async {
            c1.qp.send(Bytes::from_static(b"late")).await.unwrap();
            Instant::now()
        },
        s1.qp.recv(&in1),
        async {
            let (got, sent) =
                tokio::join!(s2.qp.recv(&in2), c2.qp.send(Bytes::from_static(b"now")));
            sent.unwrap();
            got.unwrap();
            Instant::now()
        },
    );
    let (wc, delay_done) = delay;
    assert_eq!(wc.opcode, WcOpcode::Delay);
    assert!(late - t0 >= T, "the Send behind the Delay waited its time");
    assert!(late >= delay_done, "and went after the Delay completed");
    assert!(other < delay_done, "the other queue pair was not held");
    assert_eq!(got1.unwrap().byte_len, 4);
    assert_eq!(in1.read(..4).unwrap(), b"late");
}

#[tokio::test]
async fn a_delay_alone_on_an_idle_queue_completes() {
    let cfg = DeviceConfig::default();
    let (c, _s) = connect(&Host::new(cfg.clone()), &Host::new(cfg), b"", b"").await;
    for _ in 0..3 {
        let wc = c.qp.delay(Duration::from_millis(20)).await.unwrap();
        assert_eq!(wc.opcode, WcOpcode::Delay);
    }
}

#[tokio::test]
async fn a_delay_holds_its_send_queue_only() {
    let cfg = DeviceConfig::default();
    delay_holds_only_its_queue_pair(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn a_delay_holds_its_send_queue_only_through_iwarpd() {
    let client = Host::daemon("delay", EngineConfig::default());
    delay_holds_only_its_queue_pair(client, Host::new(DeviceConfig::default())).await;
}

/// The server refuses incoming RDMA: its own Read of the client works, the client's Send
/// arrives, and the client's Write ends the connection with an access-rights Terminate,
/// leaving the server's region untouched.
async fn refusing_incoming_rdma(client: Host, server: Host) {
    let (c, s) = connect(&client, &server, b"", b"").await;
    let target = s.pd().alloc_mr(64, common::ALL).unwrap();
    let theirs = c.pd().alloc_mr(64, common::ALL).unwrap();
    theirs.write(0, b"client data").unwrap();
    s.qp.set_incoming_rdma(false);
    // The client speaks first (the server, the MPA Responder, may send only after that).
    let inbox = s.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(s.qp.recv(&inbox), c.qp.send(Bytes::from_static(b"hi")));
    sent.unwrap();
    assert_eq!(got.unwrap().byte_len, 2);
    let sink = s.pd().alloc_mr(11, Access::LOCAL_WRITE).unwrap();
    s.qp.read(theirs.remote_slice(..11), &sink).await.unwrap();
    assert_eq!(sink.read(..).unwrap(), b"client data");
    c.qp.write(Bytes::from_static(b"refused"), target.remote())
        .await
        .unwrap();
    match s.qp.closed().await {
        verbs::QpEnd::Terminated(code) => assert_eq!(code.to_wire(), [0x01, 0x02]),
        other => panic!("{other:?}"),
    }
    assert_eq!(target.read(..).unwrap(), vec![0; 64], "nothing placed");
}

#[tokio::test]
async fn a_queue_pair_can_refuse_incoming_rdma() {
    let cfg = DeviceConfig::default();
    refusing_incoming_rdma(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn a_queue_pair_can_refuse_incoming_rdma_through_iwarpd() {
    let server = Host::daemon("refuse", EngineConfig::default());
    refusing_incoming_rdma(Host::new(DeviceConfig::default()), server).await;
}
