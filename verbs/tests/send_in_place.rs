//! Payloads sent in place, straight from registered memory: in a process of their own,
//! since `in_place.rs` measures the process's RSS.

mod common;

use bytes::Bytes;
use common::{ALL, pair};
use verbs::{Payload, SendFlags, SendOp};

/// The RDMA rule lets memory change while it is being sent (the data is then undefined);
/// it must not break the connection. Payloads go out in place, read when the socket takes
/// them, so each FPDU's CRC must be computed from the octets actually written, not from
/// what the memory held when the FPDU was built. A thread rewrites the source of large
/// Writes and of the peer's Reads the whole time; every operation must succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_that_changes_while_it_is_sent_keeps_every_fpdu_valid() {
    const LEN: usize = 256 * 1024;
    let (c, s) = pair().await;
    let src = c.pd().alloc_mr(LEN, ALL).unwrap();
    let target = s.pd().alloc_mr(LEN, ALL).unwrap();
    let sink = s.pd().alloc_mr(LEN, ALL).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scribbler = {
        let (src, stop) = (src.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut round = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for at in (0..LEN).step_by(4096) {
                    src.view_mut(at..at + 4096).unwrap().fill(round);
                    round = round.wrapping_add(1);
                }
            }
        })
    };
    for i in 0..40u64 {
        c.qp.exec(
            SendOp::Write {
                data: Payload::Sgl(vec![src.local(..)]),
                dst: target.remote(),
            },
            SendFlags::SIGNALED,
        )
        .await
        .unwrap_or_else(|e| panic!("Write {i}: {e}"));
        s.qp.read(src.remote(), &sink)
            .await
            .unwrap_or_else(|e| panic!("Read {i}: {e}"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    scribbler.join().unwrap();
    // Both directions went out in place (Writes from the client, Read Responses too).
    let st = c.qp.stats();
    // (The last segment of each message, under 512 octets, is copied.)
    assert!(
        st.bytes_sent_in_place >= 2 * 40 * (LEN as u64 - 512),
        "{st:?}"
    );
    c.qp.write(Bytes::from_static(b"still up"), target.remote().slice(0, 8))
        .await
        .unwrap();
}
