//! This stack's negotiated extensions through `verbs` (seed 003): Send with Immediate Data
//! between two engines, through iwarpd, and off when either side does not agree.

mod common;

use bytes::Bytes;
use common::{ALL, Host, Side, connect, pattern};
use futures::FutureExt;
use offload_engine::EngineConfig;
use verbs::{
    Access, DeviceConfig, Extensions, MwType, Payload, QpEnd, RecvWr, RtrFlags, SendFlags, SendOp,
    WcOpcode, WcStatus,
};

/// Peer-to-peer mode, so that the accepting side may send first.
fn p2p() -> DeviceConfig {
    DeviceConfig::default().p2p(true, RtrFlags::WRITE)
}

fn p2p_engine(extensions: Extensions) -> EngineConfig {
    let mut e = EngineConfig::default();
    e.mpa.p2p = true;
    e.mpa.rtr = RtrFlags::WRITE;
    e.mpa.extensions = extensions;
    e
}

/// Client to server: values that show byte order and the extremes, payloads from empty to
/// many segments, then Send with Invalidate and Immediate Data revoking a type 2 window.
async fn send_imm_works(c: &Side, s: &Side) {
    assert_eq!(c.qp.extensions(), Extensions::ALL);
    assert_eq!(s.qp.extensions(), Extensions::ALL);
    let inbox = s.pd().alloc_mr(256 << 10, Access::LOCAL_WRITE).unwrap();
    for (i, (imm, len)) in [
        (0x0102_0304u32, 5usize),
        (0, 0),
        (0xffff_ffff, 1),
        (0x8000_0001, 200 << 10),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u8);
        let (got, sent) = tokio::join!(
            s.qp.recv(&inbox),
            c.qp.send_imm(Bytes::from(data.clone()), imm)
        );
        let sent = sent.unwrap();
        assert_eq!((sent.opcode, sent.byte_len), (WcOpcode::Send, len as u32));
        let got = got.unwrap();
        assert_eq!(
            (got.opcode, got.byte_len, got.immediate),
            (WcOpcode::Recv, len as u32, Some(u64::from(imm)))
        );
        assert_eq!(inbox.read(..len).unwrap(), data);
    }

    // A type 2 window handed to the client, written through, then revoked by the client's
    // Send with Invalidate and Immediate Data.
    let region = s.pd().alloc_mr(4096, ALL).unwrap();
    let mw = s.pd().alloc_mw(MwType::Two).unwrap();
    let grant =
        s.qp.bind_mw(&mw, &region, ..1024, Access::REMOTE_WRITE)
            .await
            .unwrap();
    let cbox = c.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    let (got, _) = tokio::join!(
        c.qp.recv(&cbox),
        s.qp.send(Bytes::copy_from_slice(&grant.encode()))
    );
    got.unwrap();
    c.qp.write(Bytes::from(pattern(1024, 9)), grant)
        .await
        .unwrap();
    let (got, sent) = tokio::join!(
        s.qp.recv(&inbox),
        c.qp.send_imm_with_invalidate(Bytes::from_static(b"done"), 77, grant.stag)
    );
    sent.unwrap();
    let got = got.unwrap();
    assert_eq!(
        (got.invalidated, got.immediate),
        (Some(grant.stag), Some(77))
    );
    assert_eq!(region.read(..1024).unwrap(), pattern(1024, 9));
    // The window is gone: a Write through it ends the connection.
    c.qp.write(Bytes::from_static(b"late"), grant)
        .await
        .unwrap();
    assert!(matches!(s.qp.closed().await, QpEnd::Terminated(_)));
}

#[tokio::test]
async fn send_with_immediate_between_two_engines() {
    let (c, s) = connect(&Host::new(p2p()), &Host::new(p2p()), b"", b"").await;
    send_imm_works(&c, &s).await;
}

#[tokio::test]
async fn send_with_immediate_through_iwarpd() {
    // Server attached to an iwarpd, then both sides.
    let server = Host::daemon("imm-s", p2p_engine(Extensions::ALL));
    let (c, s) = connect(&Host::new(p2p()), &server, b"", b"").await;
    send_imm_works(&c, &s).await;
    let client = Host::daemon("imm-c", p2p_engine(Extensions::ALL));
    let server = Host::daemon("imm-s2", p2p_engine(Extensions::ALL));
    let (c, s) = connect(&client, &server, b"", b"").await;
    send_imm_works(&c, &s).await;
}

/// Neither side may use the extension: a Send with Immediate Data fails locally with
/// nothing sent, and the connection carries on.
async fn send_imm_refused(c: &Side, s: &Side) {
    assert_eq!(c.qp.extensions(), Extensions::NONE);
    assert_eq!(s.qp.extensions(), Extensions::NONE);
    let err =
        c.qp.send_imm(Bytes::from_static(b"no"), 1)
            .await
            .unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::LocalQpOperation), "{err}");
    let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(s.qp.recv(&inbox), c.qp.send(Bytes::from_static(b"yes")));
    sent.unwrap();
    let got = got.unwrap();
    assert_eq!((got.byte_len, got.immediate), (3, None));
    assert_eq!(c.qp.stats().traffic.octets_sent[0xC..], [0; 4]);
}

#[tokio::test]
async fn off_when_either_side_turns_it_off() {
    let off = DeviceConfig::default().extensions(Extensions::NONE);
    let (c, s) = connect(
        &Host::new(off.clone()),
        &Host::new(DeviceConfig::default()),
        b"",
        b"",
    )
    .await;
    send_imm_refused(&c, &s).await;
    let (c, s) = connect(
        &Host::new(DeviceConfig::default()),
        &Host::new(off),
        b"",
        b"",
    )
    .await;
    send_imm_refused(&c, &s).await;
    let server = Host::daemon("imm-off", p2p_engine(Extensions::NONE));
    let (c, s) = connect(&Host::new(p2p()), &server, b"", b"").await;
    send_imm_refused(&c, &s).await;
}

#[tokio::test]
async fn private_data_stays_the_applications() {
    let (c, s) = connect(
        &Host::new(DeviceConfig::default()),
        &Host::new(DeviceConfig::default()),
        b"from the client",
        b"from the server",
    )
    .await;
    assert_eq!(c.qp.extensions(), Extensions::ALL);
    assert_eq!(&c.peer_data[..], b"from the server");
    assert_eq!(&s.peer_data[..], b"from the client");
}

#[tokio::test]
async fn only_the_solicited_variant_wakes_a_solicited_only_arm() {
    let (c, s) = connect(&Host::new(p2p()), &Host::new(p2p()), b"", b"").await;
    let inbox = s.pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    for id in 1..=2 {
        s.qp.post_recv(RecvWr {
            wr_id: id,
            sgl: inbox.local(..32).into(),
        })
        .unwrap();
    }
    s.cq().req_notify(true);
    let imm = |flags| {
        c.qp.exec(
            SendOp::Send {
                data: Payload::Bytes(Bytes::from_static(b"x")),
                invalidate: None,
                immediate: Some(5),
            },
            flags,
        )
    };
    imm(SendFlags::NONE).await.unwrap();
    let wc = s.cq().next().await.unwrap();
    assert_eq!((wc.wc.wr_id, wc.wc.solicited), (1, false));
    assert!(
        s.cq().notified().now_or_never().is_none(),
        "a Send with Immediate Data without SE does not fire the arm"
    );
    imm(SendFlags::SOLICITED).await.unwrap();
    s.cq().notified().await;
    let wc = s.cq().next().await.unwrap();
    assert_eq!((wc.wc.wr_id, wc.wc.solicited), (2, true));
}

/// Reads of every size into a sink with local write only, as Read V2 when both agreed
/// and as RFC 5040 Reads otherwise: same data either way.
async fn reads_land(c: &Side, s: &Side, v2: bool) {
    assert_eq!(c.qp.extensions().contains(Extensions::READ_V2), v2);
    let src = s.pd().alloc_mr(256 << 10, ALL).unwrap();
    let data = pattern(256 << 10, 7);
    src.write(0, &data).unwrap();
    let sink = c.pd().alloc_mr(256 << 10, Access::LOCAL_WRITE).unwrap();
    for (off, len) in [(0usize, 1usize), (3, 4096), (100, 200 << 10)] {
        let wc =
            c.qp.read(src.remote_slice(off..off + len), sink.local(..len))
                .await
                .unwrap();
        assert_eq!(wc.byte_len as usize, len);
        assert_eq!(sink.read(..len).unwrap(), data[off..off + len]);
    }
    // A scatter list over two regions: Read V2 only.
    let other = c.pd().alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let sgl = [sink.local(..1000), other.local(96..4096)];
    let done = c.qp.read_sgl(src.remote_slice(5..5005), sgl).await;
    if v2 {
        assert_eq!(done.unwrap().byte_len, 5000);
        assert_eq!(sink.read(..1000).unwrap(), data[5..1005]);
        assert_eq!(other.read(96..4096).unwrap(), data[1005..5005]);
    } else {
        let err = done.unwrap_err();
        assert_eq!(err.status(), Some(WcStatus::LocalQpOperation), "{err}");
    }
}

#[tokio::test]
async fn reads_are_v2_when_both_agree_and_v1_otherwise() {
    let (c, s) = connect(&Host::new(p2p()), &Host::new(p2p()), b"", b"").await;
    reads_land(&c, &s, true).await;
    let server = Host::daemon("v2-s", p2p_engine(Extensions::ALL));
    let client = Host::daemon("v2-c", p2p_engine(Extensions::ALL));
    let (c, s) = connect(&client, &server, b"", b"").await;
    reads_land(&c, &s, true).await;
    let off = DeviceConfig::default().extensions(Extensions::SEND_IMMEDIATE);
    let (c, s) = connect(
        &Host::new(off),
        &Host::new(DeviceConfig::default()),
        b"",
        b"",
    )
    .await;
    reads_land(&c, &s, false).await;
}
