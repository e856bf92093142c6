//! Seed 001's "Send Queue Drained" option through `verbs`, embedded and through iwarpd.

mod common;

use bytes::Bytes;
use common::{Host, connect};
use offload_engine::EngineConfig;
use verbs::{Access, DeviceConfig, QpState, STag, WcStatus};

async fn a_failed_local_request_drains_only_the_send_queue(client: Host, server: Host) {
    let (c, s) = connect(&client, &server, b"", b"").await;
    c.qp.set_drain_on_local_failure(true);
    let inbox = s.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    // A Local Invalidate of an STag this side does not have fails its local checks.
    let err =
        c.qp.local_invalidate(STag::from_u32(0x00ab_cd00))
            .await
            .unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::LocalProtection), "{err}");
    let err = c.qp.send(Bytes::from_static(b"drained")).await.unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::Flushed), "{err}");
    assert_eq!(c.qp.state(), QpState::Rts, "the connection lives on");
    c.qp.resume_send_queue();
    let (got, sent) = tokio::join!(s.qp.recv(&inbox), c.qp.send(Bytes::from_static(b"again")));
    sent.unwrap();
    assert_eq!(got.unwrap().byte_len, 5);
    assert_eq!(inbox.read(..5).unwrap(), b"again");
}

#[tokio::test]
async fn send_queue_drained_instead_of_error() {
    let cfg = DeviceConfig::default();
    a_failed_local_request_drains_only_the_send_queue(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn send_queue_drained_instead_of_error_through_iwarpd() {
    let client = Host::daemon("drain", EngineConfig::default());
    a_failed_local_request_drains_only_the_send_queue(client, Host::new(DeviceConfig::default()))
        .await;
}
