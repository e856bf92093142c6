//! Soak: queue pairs connect, move verified data and disconnect in cycles, against one
//! server engine that registers a fresh region for every connection and deregisters it
//! when the connection ends (as iwarpd does). Afterwards nothing is left behind: no
//! queue pair, no open file descriptor, no tokio task, and the resident memory back near
//! where it started.
//!
//! Bounded for CI (1,000 queue pairs, 100 at a time); `IWARP_SOAK_QPS=100000` runs
//! longer. One progress line per cycle goes to stderr.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use offload_engine::tpt::Base;
use offload_engine::{Cq, Engine, EngineConfig, QpEnd, QpInit};
use rdmap::testing::XorShift;
use rdmap::{Access, Payload, RemoteBuf, SendFlags, SendOp, SendWr, Sge, WcStatus};

/// Octets each connection writes and reads back.
const LEN: usize = 64 * 1024;
/// Connections open at once.
const AT_ONCE: usize = 100;
/// Cycles of [`AT_ONCE`] before the baseline is taken.
const WARM_UP: usize = 3;
const RW: Access = Access::REMOTE_READ
    .union(Access::REMOTE_WRITE)
    .union(Access::LOCAL_READ)
    .union(Access::LOCAL_WRITE);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4
}

/// One client connection: Write a pattern, Read it back, compare, disconnect.
async fn one(client: Engine, addr: SocketAddr, seed: u64) {
    let pd = client.alloc_pd();
    let cq = Cq::new(8);
    let (qp, private) = client
        .connect(addr, QpInit::new(pd, &cq), b"")
        .await
        .expect("connect");
    let remote = RemoteBuf::decode(&private).expect("the server's region");
    let data = XorShift::new(seed).bytes(LEN);
    let sink = client
        .tpt()
        .alloc_region(pd, LEN, Base::ZeroBased, RW)
        .unwrap();
    qp.post_send(SendWr {
        wr_id: 1,
        op: SendOp::Write {
            data: Payload::Bytes(Bytes::from(data.clone())),
            dst: remote,
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    qp.post_send(SendWr {
        wr_id: 2,
        op: SendOp::Read {
            src: remote,
            dst: Sge {
                stag: sink,
                to: 0,
                len: LEN as u32,
            },
        },
        flags: SendFlags::SIGNALED,
    })
    .unwrap();
    for _ in 0..2 {
        let wc = tokio::time::timeout(Duration::from_secs(60), cq.next())
            .await
            .expect("a completion")
            .unwrap();
        assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
    }
    let mut back = vec![0; LEN];
    client.tpt().read(pd, sink, 0, &mut back).unwrap();
    assert!(
        back == data,
        "connection {seed}: read back what was written"
    );
    qp.disconnect();
    assert_eq!(qp.closed().await, QpEnd::Closed);
    client.tpt().deregister(sink).unwrap();
    client.tpt().dealloc_pd(pd).unwrap();
}

#[test]
fn a_thousand_queue_pairs_come_and_go_and_leave_nothing_behind() {
    let total: usize = std::env::var("IWARP_SOAK_QPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Every client is 127.0.0.1: let all of a cycle's handshakes be in progress at once.
        let mut cfg = EngineConfig::default();
        cfg.max_pending_per_address = 2 * AT_ONCE;
        let server = Engine::new(cfg);
        let client = Engine::new(EngineConfig::default());
        let listener = Arc::new(
            server
                .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .unwrap(),
        );
        let addr = listener.local_addr();
        let s = server.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok(inc) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let pd = s.alloc_pd();
                    let region = s.tpt().alloc_region(pd, LEN, Base::ZeroBased, RW).unwrap();
                    let cq = Cq::new(8);
                    let remote = RemoteBuf {
                        stag: region,
                        to: 0,
                        len: LEN as u32,
                    };
                    if let Ok(qp) = inc.accept(QpInit::new(pd, &cq), &remote.encode()).await {
                        qp.closed().await;
                    }
                    s.tpt().deregister(region).unwrap();
                    s.tpt().dealloc_pd(pd).unwrap();
                });
            }
        });
        let metrics = tokio::runtime::Handle::current().metrics();
        // The first cycles warm the allocator and the runtime up; the baseline is after
        // them. (After one cycle it was too early: the allocator's per-thread arenas
        // still grew for two or three more, to a plateau, 14.1 -> 31.8 -> 28.6 MiB in a
        // CI run, the same with the build before the shared socket; a leak keeps growing
        // past the plateau, which the comparison at the end still catches.)
        let mut done = 0;
        let mut baseline = None;
        let start = Instant::now();
        while done < total {
            let n = AT_ONCE.min(total - done);
            let cycle: Vec<_> = (0..n)
                .map(|i| tokio::spawn(one(client.clone(), addr, (done + i) as u64)))
                .collect();
            for c in cycle {
                c.await.expect("a connection task");
            }
            done += n;
            // Let the server's per-connection tasks finish their cleanup.
            let settle = Instant::now();
            while !server.qps().is_empty() && settle.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let now = (open_fds(), metrics.num_alive_tasks(), rss_kib());
            eprintln!(
                "soak: {done}/{total} queue pairs, {:.1} s: fds {}, tasks {}, RSS {} KiB",
                start.elapsed().as_secs_f64(),
                now.0,
                now.1,
                now.2
            );
            if done >= (WARM_UP * AT_ONCE).min(total) {
                baseline.get_or_insert(now);
            }
        }
        let (fds0, tasks0, rss0) = baseline.unwrap();
        let (fds, tasks, rss) = (open_fds(), metrics.num_alive_tasks(), rss_kib());
        assert!(server.qps().is_empty(), "server queue pairs left");
        assert!(client.qps().is_empty(), "client queue pairs left");
        assert!(
            fds <= fds0,
            "file descriptors: {fds0} after the first cycle, {fds} at the end"
        );
        assert!(
            tasks <= tasks0,
            "tasks: {tasks0} after the first cycle, {tasks} at the end"
        );
        assert!(
            rss <= rss0 * 2,
            "RSS: {rss0} KiB after the first cycle, {rss} KiB at the end"
        );
        acceptor.abort();
    });
}
