//! Memory through the API: deregistration, drops, type 1 and type 2 windows, Send with
//! Invalidate, fast registration.

mod common;

use bytes::Bytes;
use common::{ALL, Host, connect, pair, pattern};
use offload_engine::EngineConfig;
use verbs::{Access, DeviceConfig, MemError, MwType, QpEnd, RemoteBuf, WcStatus};

#[tokio::test]
async fn the_peer_writes_in_place_and_deregister_revokes_access() {
    let (c, s) = pair().await;
    let target = s.pd().alloc_mr(4096, ALL).unwrap();
    let remote = target.remote();
    c.qp.write(Bytes::from(pattern(4096, 5)), remote)
        .await
        .unwrap();
    // The Write completed at the socket; a Read behind it proves it was placed.
    let sink = c.pd().alloc_mr(1, Access::LOCAL_WRITE).unwrap();
    c.qp.read(remote.slice(0, 1), &sink).await.unwrap();

    assert_eq!(
        &target.view(..).unwrap()[..],
        &pattern(4096, 5)[..],
        "in place"
    );
    target.deregister().await.unwrap();
    let err = c.qp.read(remote.slice(0, 1), &sink).await.unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::RemoteAccess), "{err}");
    assert!(matches!(c.qp.closed().await, QpEnd::TerminatedByPeer(_)));
}

#[tokio::test]
async fn dropping_the_last_handles_releases_the_entries() {
    releases_on_drop(Host::new(DeviceConfig::default()));
}

#[tokio::test]
async fn dropping_the_last_handles_releases_the_entries_through_iwarpd() {
    releases_on_drop(Host::daemon("mem-drop", EngineConfig::default()));
}

fn releases_on_drop(host: Host) {
    let entries = || host.device.stats().memory_entries;
    let before = entries();
    let mr = host.pd.alloc_mr(64, ALL).unwrap();
    let clone = mr.clone();
    let mw = host.pd.alloc_mw(MwType::One).unwrap();
    mw.bind(&mr, 0..16, Access::REMOTE_READ).unwrap();
    assert_eq!(entries(), before + 2);
    drop(mr);
    drop(clone);
    assert_eq!(entries(), before + 2, "the bound window keeps the region");
    drop(mw);
    assert_eq!(entries(), before, "window, then region, released");
}

#[tokio::test]
async fn deregister_refuses_while_a_window_is_bound() {
    let host = Host::new(DeviceConfig::default());
    let mr = host.pd.alloc_mr(64, ALL).unwrap();
    let mw = host.pd.alloc_mw(MwType::One).unwrap();
    mw.bind(&mr, .., Access::REMOTE_READ).unwrap();
    let err = mr.clone().deregister().await.unwrap_err();
    assert!(
        matches!(
            err,
            MemError::InUse {
                what: "bound windows",
                count: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("bound windows"), "{err}");
    assert!(mr.read(..).is_ok(), "still registered");
    mw.invalidate().unwrap();
    mr.deregister().await.unwrap();
}

#[tokio::test]
async fn type1_window_grants_and_revokes() {
    type1_window(Host::new(DeviceConfig::default())).await;
}

#[tokio::test]
async fn type1_window_grants_and_revokes_through_iwarpd() {
    type1_window(Host::daemon("mw1", EngineConfig::default())).await;
}

async fn type1_window(server: Host) {
    let region = server.pd.alloc_mr(1024, ALL).unwrap();
    let mw = server.pd.alloc_mw(MwType::One).unwrap();
    let old = mw.stag();
    let grant = mw
        .bind(
            &region,
            256..512,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    assert_eq!((grant.stag, grant.to, grant.len), (mw.stag(), 256, 256));
    assert_eq!(grant.stag.instance(), old.instance().wrapping_add(1));
    assert_eq!(mw.remote(), Some(grant));
    let (c, _s) = connect(
        &Host::new(DeviceConfig::default()),
        &server,
        b"",
        &grant.encode(),
    )
    .await;
    let grant = RemoteBuf::decode(&c.peer_data).unwrap();
    c.qp.write(Bytes::from(pattern(256, 1)), grant)
        .await
        .unwrap();
    let sink = c.pd().alloc_mr(256, Access::LOCAL_WRITE).unwrap();
    c.qp.read(grant, &sink).await.unwrap();
    assert_eq!(sink.read(..).unwrap(), pattern(256, 1));
    assert_eq!(region.read(256..512).unwrap(), pattern(256, 1));
    assert_eq!(region.read(..256).unwrap(), vec![0; 256]);

    mw.invalidate().unwrap();
    assert_eq!(mw.remote(), None);
    let err = c.qp.read(grant, &sink).await.unwrap_err();
    assert_eq!(err.status(), Some(WcStatus::RemoteAccess), "{err}");
}

#[tokio::test]
async fn send_with_invalidate_of_a_type2_window() {
    // Peer-to-peer mode, so the accepting side may send first.
    let cfg = DeviceConfig::default().p2p(true, verbs::RtrFlags::WRITE);
    type2_window(Host::new(cfg.clone()), Host::new(cfg)).await;
}

#[tokio::test]
async fn send_with_invalidate_of_a_type2_window_through_iwarpd() {
    let cfg = DeviceConfig::default().p2p(true, verbs::RtrFlags::WRITE);
    let mut engine = EngineConfig::default();
    engine.mpa.p2p = true;
    engine.mpa.rtr = verbs::RtrFlags::WRITE;
    type2_window(Host::new(cfg), Host::daemon("mw2", engine)).await;
}

async fn type2_window(client: Host, server: Host) {
    let (c, s) = connect(&client, &server, b"", b"").await;
    let region = s.pd().alloc_mr(4096, ALL).unwrap();
    let mw = s.pd().alloc_mw(MwType::Two).unwrap();
    let grant =
        s.qp.bind_mw(&mw, &region, 1024..2048, Access::REMOTE_WRITE)
            .await
            .unwrap();
    assert_eq!((grant.stag, grant.to, grant.len), (mw.stag(), 1024, 1024));

    // Hand the window over in a Send; the client writes through it.
    let cbox = c
        .pd()
        .alloc_mr(RemoteBuf::ENCODED_LEN, Access::LOCAL_WRITE)
        .unwrap();
    let (got, _) = tokio::join!(
        c.qp.recv(&cbox),
        s.qp.send(Bytes::copy_from_slice(&grant.encode()))
    );
    assert_eq!(got.unwrap().byte_len, 16);
    let grant = RemoteBuf::decode(&cbox.read(..).unwrap()).unwrap();
    c.qp.write(Bytes::from(pattern(1024, 4)), grant)
        .await
        .unwrap();

    // "Done": the Send with Invalidate revokes the window on the server.
    let sbox = s.pd().alloc_mr(16, Access::LOCAL_WRITE).unwrap();
    let (got, sent) = tokio::join!(
        s.qp.recv(&sbox),
        c.qp.send_with_invalidate(Bytes::from_static(b"done"), grant.stag)
    );
    sent.unwrap();
    let got = got.unwrap();
    assert_eq!(got.invalidated, Some(grant.stag));
    assert_eq!(sbox.read(..4).unwrap(), b"done");
    assert_eq!(region.read(1024..2048).unwrap(), pattern(1024, 4));

    // The window is unbound now: bind it again (next instance) to the same queue pair.
    let again =
        s.qp.bind_mw(&mw, &region, ..512, Access::REMOTE_READ)
            .await
            .unwrap();
    assert_ne!(again.stag, grant.stag);
    let sink = c.pd().alloc_mr(512, Access::LOCAL_WRITE).unwrap();
    c.qp.read(again, &sink).await.unwrap();
    assert_eq!(sink.read(..).unwrap(), region.read(..512).unwrap());

    // Writing through the old STag now ends the connection.
    c.qp.write(Bytes::from_static(b"late"), grant)
        .await
        .unwrap();
    assert!(matches!(s.qp.closed().await, QpEnd::Terminated(_)));
}

#[tokio::test]
async fn fast_registration_on_the_send_queue() {
    fast_registration(Host::new(DeviceConfig::default())).await;
}

#[tokio::test]
async fn fast_registration_on_the_send_queue_through_iwarpd() {
    fast_registration(Host::daemon("frmr", EngineConfig::default())).await;
}

async fn fast_registration(server: Host) {
    let (c, s) = connect(&Host::new(DeviceConfig::default()), &server, b"", b"").await;
    let frmr = s.pd().alloc_fast_reg_mr(8192).unwrap();
    assert_eq!((frmr.len(), frmr.fast_reg_max_len()), (0, Some(8192)));
    let grant =
        s.qp.fast_register(
            &frmr,
            0x5000,
            4096,
            Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .await
        .unwrap();
    assert_eq!((grant.to, grant.len), (0x5000, 4096));
    assert_eq!(
        (frmr.stag(), frmr.len(), frmr.to()),
        (grant.stag, 4096, 0x5000)
    );
    frmr.write(100, b"fast").unwrap();
    let sink = c.pd().alloc_mr(4, Access::LOCAL_WRITE).unwrap();
    c.qp.read(grant.slice(100, 4), &sink).await.unwrap();
    assert_eq!(sink.read(..).unwrap(), b"fast");

    // Too long for the allocation: refused before posting, the queue pair lives on.
    let err =
        s.qp.fast_register(&frmr, 0, 8193, Access::REMOTE_READ)
            .await
            .unwrap_err();
    assert!(matches!(err, verbs::WcError::Mem { .. }), "{err:?}");

    // Invalidate, then re-register under the next instance.
    s.qp.local_invalidate(frmr.stag()).await.unwrap();
    let second =
        s.qp.fast_register(&frmr, 0, 8192, Access::REMOTE_READ)
            .await
            .unwrap();
    assert_eq!(
        second.stag.instance(),
        grant.stag.instance().wrapping_add(1)
    );
    let sink = c.pd().alloc_mr(4, Access::LOCAL_WRITE).unwrap();
    c.qp.read(second.slice(100, 4), &sink).await.unwrap();
    assert_eq!(sink.read(..).unwrap(), b"fast", "same octets, new STag");
}

#[tokio::test]
async fn one_touch_windows_serve_one_write_message() {
    one_touch(Host::new(DeviceConfig::default())).await;
}

#[tokio::test]
async fn one_touch_windows_serve_one_write_message_through_iwarpd() {
    one_touch(Host::daemon("one-touch", EngineConfig::default())).await;
}

/// Seed 001's one-touch rows that occur over TCP, for a type 1 window (bound by the verb)
/// and a type 2 window (bound by a work request): segments before a message's last are
/// placed (row 1); a multiple-touch window takes message after message (row 2); the last
/// segment of the first Write message uses a one-touch window up and is placed (row 4);
/// a second message is refused with a Terminate and nothing of it is placed (row 3). A
/// Read through the window does not use it up. The writer sends 512-octet ULPDUs, so
/// each 4 KiB message is many segments.
async fn one_touch(server: Host) {
    let region = server.pd.alloc_mr(8192, ALL).unwrap();
    let mw = server.pd.alloc_mw(MwType::One).unwrap();
    mw.set_one_touch(true);
    let once = mw
        .bind(&region, ..4096, Access::REMOTE_WRITE | Access::REMOTE_READ)
        .unwrap();
    let multi = server.pd.alloc_mw(MwType::One).unwrap();
    let many = multi
        .bind(&region, 4096.., Access::REMOTE_WRITE | Access::REMOTE_READ)
        .unwrap();
    let client = Host::new(DeviceConfig::default().mulpdu(512));
    let (c, s) = connect(&client, &server, b"", b"").await;
    let sink = c.pd().alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for round in 0..3u8 {
        c.qp.write(Bytes::from(vec![round; 4096]), many)
            .await
            .unwrap();
    }
    c.qp.read(once, &sink).await.unwrap();
    c.qp.write(Bytes::from(pattern(4096, 9)), once)
        .await
        .unwrap();
    // A Read behind the Write returns once the Write is placed.
    c.qp.read(many, &sink).await.unwrap();
    assert_eq!(
        sink.read(..).unwrap(),
        vec![2; 4096],
        "row 2: every message placed"
    );
    assert_eq!(
        region.read(..4096).unwrap(),
        pattern(4096, 9),
        "rows 1 and 4"
    );
    c.qp.write(Bytes::from(vec![0xee; 4096]), once)
        .await
        .unwrap();
    assert!(matches!(ended(&c.qp).await, QpEnd::TerminatedByPeer(_)));
    assert!(matches!(ended(&s.qp).await, QpEnd::Terminated(_)));
    assert_eq!(
        region.read(..4096).unwrap(),
        pattern(4096, 9),
        "row 3: nothing of the second message placed"
    );

    // Type 2, bound on the server's queue pair by a work request.
    let (c, s) = connect(&client, &server, b"", b"").await;
    let mw2 = server.pd.alloc_mw(MwType::Two).unwrap();
    mw2.set_one_touch(true);
    let once2 =
        s.qp.bind_mw(&mw2, &region, 4096.., Access::REMOTE_WRITE)
            .await
            .unwrap();
    c.qp.write(Bytes::from(pattern(4096, 5)), once2)
        .await
        .unwrap();
    c.qp.write(Bytes::from_static(b"again"), once2)
        .await
        .unwrap();
    assert!(matches!(ended(&c.qp).await, QpEnd::TerminatedByPeer(_)));
    assert_eq!(region.read(4096..).unwrap(), pattern(4096, 5));
}

/// How `qp` ended, waiting at most 10 s.
async fn ended(qp: &verbs::Qp) -> QpEnd {
    tokio::time::timeout(std::time::Duration::from_secs(10), qp.closed())
        .await
        .expect("the queue pair did not end within 10 s")
}
