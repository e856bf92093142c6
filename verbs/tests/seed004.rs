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
async fn a_delay_holds_its_send_queue_only() {
    let cfg = DeviceConfig::default();
    delay_holds_only_its_queue_pair(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn a_delay_holds_its_send_queue_only_through_iwarpd() {
    let client = Host::daemon("delay", EngineConfig::default());
    delay_holds_only_its_queue_pair(client, Host::new(DeviceConfig::default())).await;
}
