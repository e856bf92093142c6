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

/// Seed 001's combined register-and-send: the client registers a region and advertises it
/// in one request; the server writes into it and gives it back with Send with Invalidate,
/// which deregisters it; a later Write to it ends the connection. Registering it again
/// while it is still valid fails its local check and, with the drain option, sends nothing.
async fn register_and_send_then_invalidated_by_the_peer(client: Host, server: Host) {
    let (c, s) = connect(&client, &server, b"", b"").await;
    c.qp.set_drain_on_local_failure(true);
    let region = c.pd().alloc_fast_reg_mr(4096).unwrap();
    let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(
        s.qp.recv(&inbox),
        c.qp.register_and_send(&region, 0, 4096, Access::REMOTE_WRITE, |r| {
            Bytes::copy_from_slice(&r.encode())
        })
    );
    let grant = sent.unwrap();
    assert_eq!(got.unwrap().byte_len, 16);
    let advert = verbs::RemoteBuf::decode(&inbox.read(..16).unwrap()).unwrap();
    assert_eq!(advert, grant);
    s.qp.write(Bytes::from_static(b"into the client"), advert)
        .await
        .unwrap();
    // The Send behind the Write says it is placed.
    let cbox = c.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(c.qp.recv(&cbox), s.qp.send(Bytes::from_static(b"ok")));
    sent.unwrap();
    got.unwrap();
    assert_eq!(region.read(..15).unwrap(), b"into the client");

    // Registering it again while valid: a local failure, nothing sent, queue drained.
    let err =
        c.qp.register_and_send(&region, 0, 16, Access::REMOTE_WRITE, |_| {
            Bytes::from_static(b"never")
        })
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::LocalProtection), "{err}");
    c.qp.resume_send_queue();

    // The server gives the region back: Send with Invalidate.
    let (got, sent) = tokio::join!(
        c.qp.recv(&cbox),
        s.qp.send_with_invalidate(Bytes::from_static(b"done"), advert.stag)
    );
    sent.unwrap();
    assert_eq!(got.unwrap().invalidated, Some(advert.stag));
    // A Write to the deregistered region ends the connection.
    s.qp.write(Bytes::from_static(b"late"), advert)
        .await
        .unwrap();
    assert!(matches!(c.qp.closed().await, verbs::QpEnd::Terminated(_)));
}

#[tokio::test]
async fn register_and_send() {
    let cfg = DeviceConfig::default();
    register_and_send_then_invalidated_by_the_peer(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn register_and_send_through_iwarpd() {
    let client = Host::daemon("regsend", EngineConfig::default());
    register_and_send_then_invalidated_by_the_peer(client, Host::new(DeviceConfig::default()))
        .await;
}
