//! Posting many send-queue requests at once (`Qp::post_send_batch`): one lock, one wake
//! of the engine, every request run in order; a batch that meets a full queue queues its
//! head and says how much.

mod common;

use bytes::Bytes;
use common::{ALL, Host, connect, pattern};
use verbs::{DeviceConfig, Payload, PostError, SendFlags, SendOp, SendWr, WcStatus};

fn write(id: u64, data: &[u8], dst: verbs::RemoteBuf) -> SendWr {
    SendWr {
        wr_id: id,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::copy_from_slice(data)),
            dst,
        },
        flags: SendFlags::SIGNALED,
    }
}

#[tokio::test]
async fn a_batch_runs_every_request_in_order() {
    let cfg = DeviceConfig::default();
    let (c, s) = connect(&Host::new(cfg.clone()), &Host::new(cfg), b"", b"").await;
    let target = s.pd().alloc_mr(64 * 100, ALL).unwrap();
    let data = pattern(64 * 100, 7);
    let wrs = (0..100u64).map(|i| {
        let at = i as u32 * 64;
        write(
            i,
            &data[at as usize..at as usize + 64],
            target.remote().slice(at, 64),
        )
    });
    c.qp.post_send_batch(wrs).unwrap();
    for i in 0..100 {
        let wc = c.cq().next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (i, WcStatus::Success));
    }
    // A Read behind the Writes proves they were placed.
    let sink = c.pd().alloc_mr(1, ALL).unwrap();
    c.qp.read(target.remote().slice(0, 1), &sink).await.unwrap();
    assert_eq!(&target.view(..).unwrap()[..], &data[..]);
}

#[tokio::test]
async fn a_batch_that_meets_a_full_queue_says_how_much_it_queued() {
    let cfg = DeviceConfig::default().queue_depths(8, 8);
    let (c, s) = connect(&Host::new(cfg.clone()), &Host::new(cfg), b"", b"").await;
    let target = s.pd().alloc_mr(64, ALL).unwrap();
    let wrs = (0..20u64).map(|i| write(i, &[i as u8; 8], target.remote().slice(0, 8)));
    let (queued, err) = c.qp.post_send_batch(wrs).unwrap_err();
    assert_eq!(err, PostError::QueueFull);
    assert!((1..=8).contains(&queued), "queued {queued}");
    for i in 0..queued as u64 {
        let wc = c.cq().next().await.unwrap();
        assert_eq!((wc.wc.wr_id, wc.wc.status), (i, WcStatus::Success));
    }
    let reserved = SendWr {
        wr_id: 1 << 63,
        ..write(0, b"x", target.remote())
    };
    assert_eq!(
        c.qp.post_send_batch([reserved]).unwrap_err(),
        (0, PostError::ReservedWrId)
    );
}
