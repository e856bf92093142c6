//! No allocation per message: once a connection runs, posting work requests, moving them
//! through the engine and the socket, and taking their completions allocates nothing per
//! message. A counting global allocator (this test's own process) counts every allocation
//! of every thread, the engines' drivers included, while a perftest-style loop keeps 128
//! small operations in flight.
//!
//! One thing may allocate: the arena small FPDUs are copied into is 64 KiB, and when it is
//! full while part of it still waits for the socket, a fresh one is taken (about once per
//! 400 messages of 64 octets here). So the bound is one allocation per 100 messages; a
//! gather list, a waker, a completion vector or a work request that allocates each time
//! breaks it by a factor of 100.
//!
//! Through iwarpd, a servant that goes to sleep (nothing moved for 100 µs) hands reading
//! back to its connection's driver, which registers its socket with the runtime again:
//! up to [`SLEEP_ALLOCATIONS`] per sleep, not counted (each sleep costs a thread wake-up
//! anyway). While the servant spins and reads the socket itself, the driver leaves the
//! socket unregistered, so that no packet wakes a thread.

mod common;

use std::alloc::System;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{ALL, Host, Side, connect, pair};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::sync::Notify;
use verbs::{Payload, RecvWr, SendFlags, SendOp, SendWr, Wc, WcStatus};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Operations in flight (perftest's default TX depth).
const DEPTH: usize = 128;
/// Messages before counting starts (buffers and queues reach their working size).
const WARM_UP: usize = 20_000;
/// Messages counted.
const COUNTED: usize = 20_000;
/// The most allocations per message allowed (see the module docs).
const BOUND: f64 = 0.01;
/// What one sleep of iwarpd's servant may allocate (see the module docs; 2.1 measured).
const SLEEP_ALLOCATIONS: usize = 3;

/// The tests count every allocation of the process, so they run one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Allocations and reallocations so far, every thread.
fn allocations() -> usize {
    let s = GLOBAL.stats();
    s.allocations + s.reallocations
}

/// Receives the server has posted and the client has not used yet (Send credits).
#[derive(Default)]
struct Credits {
    count: AtomicUsize,
    added: Notify,
}

impl Credits {
    fn add(&self, n: usize) {
        self.count.fetch_add(n, Ordering::Release);
        self.added.notify_one();
    }

    /// Takes up to `want` credits, waiting for at least one.
    async fn take(&self, want: usize) -> usize {
        loop {
            let have = self.count.load(Ordering::Acquire);
            if have == 0 {
                self.added.notified().await;
                continue;
            }
            let n = have.min(want);
            if self.count.fetch_sub(n, Ordering::AcqRel) >= n {
                return n;
            }
            self.count.fetch_add(n, Ordering::Release);
        }
    }
}

/// Keeps up to `DEPTH` operations made by `op` in flight until `total` have completed;
/// with `credits`, never more than the receives the server has posted.
async fn pipeline(c: &Side, total: usize, op: impl Fn() -> SendOp, credits: Option<&Credits>) {
    let mut wcs: Vec<Wc> = Vec::with_capacity(DEPTH);
    let (mut posted, mut done) = (0, 0);
    while done < total {
        let mut room = (DEPTH - (posted - done)).min(total - posted);
        if let Some(credits) = credits
            && room > 0
        {
            room = credits.take(room).await;
        }
        c.qp.post_send_batch((0..room).map(|_| SendWr {
            wr_id: 1,
            op: op(),
            flags: SendFlags::SIGNALED,
        }))
        .unwrap();
        posted += room;
        if c.cq().poll(&mut wcs, DEPTH).unwrap() == 0 {
            wcs.push(c.cq().next().await.unwrap());
        }
        for wc in wcs.drain(..) {
            assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
            done += 1;
        }
    }
}

/// Allocations per message over `COUNTED` messages, after `WARM_UP` of them.
async fn per_message(c: &Side, op: impl Fn() -> SendOp, credits: Option<&Credits>) -> f64 {
    pipeline(c, WARM_UP, &op, credits).await;
    let before = allocations();
    let slept = c.qp.stats().push.daemon_sleeps;
    pipeline(c, COUNTED, &op, credits).await;
    let sleeps = (c.qp.stats().push.daemon_sleeps - slept) as usize;
    let allocated = allocations() - before;
    if sleeps > 0 {
        eprintln!("{allocated} allocations, {sleeps} sleeps of iwarpd's servant");
    }
    // Each sleep, up to one per 100 messages (a servant that sleeps more often is a
    // wake-up every few messages, and its allocations count in full).
    let allowed = SLEEP_ALLOCATIONS * sleeps.min(COUNTED / 100);
    allocated.saturating_sub(allowed) as f64 / COUNTED as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_reads_and_sends_allocate_nothing_per_message() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (c, s) = pair().await;
    let src = c.pd().alloc_mr(4096, ALL).unwrap();
    let target = s.pd().alloc_mr(4096, ALL).unwrap();
    let write = || SendOp::Write {
        data: Payload::Sgl(src.local(..64).into()),
        dst: target.remote().slice(0, 64),
    };
    let read = || SendOp::Read {
        src: target.remote().slice(0, 64),
        dst: src.local(64..128),
    };
    let send = || SendOp::Send {
        data: Payload::Sgl(src.local(..64).into()),
        invalidate: None,
        immediate: None,
    };
    let mut results = vec![
        ("RDMA Write 64 B", per_message(&c, write, None).await),
        ("RDMA Read 64 B", per_message(&c, read, None).await),
    ];

    // Sends: the server reposts each receive as it completes and hands out a credit.
    let credits = Arc::new(Credits::default());
    let inbox = s.pd().alloc_mr(4096, ALL).unwrap();
    let receiver = {
        let credits = credits.clone();
        tokio::spawn(async move {
            let post = |s: &Side| {
                s.qp.post_recv(RecvWr {
                    wr_id: 0,
                    sgl: inbox.local(..64).into(),
                })
                .unwrap();
            };
            (0..DEPTH).for_each(|_| post(&s));
            credits.add(DEPTH);
            let mut wcs = Vec::with_capacity(DEPTH);
            let mut got = 0;
            while got < WARM_UP + COUNTED {
                if s.cq().poll(&mut wcs, DEPTH).unwrap() == 0 {
                    wcs.push(s.cq().next().await.unwrap());
                }
                let n = wcs.len();
                for wc in wcs.drain(..) {
                    assert_eq!(wc.wc.status, WcStatus::Success, "{wc:?}");
                    post(&s);
                }
                got += n;
                credits.add(n);
            }
            s
        })
    };
    results.push((
        "Send 64 B (and the receiver's reposts)",
        per_message(&c, send, Some(&credits)).await,
    ));
    let _server = receiver.await.unwrap();

    results.push((
        "awaited RDMA Write 64 B (Qp::exec)",
        awaited(&c, write).await,
    ));
    check(&results);
}

/// Allocations per message of one awaited request at a time (the async sugar: each
/// completion delivered to a future).
async fn awaited(c: &Side, op: impl Fn() -> SendOp) -> f64 {
    let exec = || async {
        c.qp.exec(op(), SendFlags::SIGNALED).await.unwrap();
    };
    for _ in 0..WARM_UP / 10 {
        exec().await;
    }
    let before = allocations();
    for _ in 0..COUNTED / 10 {
        exec().await;
    }
    (allocations() - before) as f64 / (COUNTED / 10) as f64
}

fn check(results: &[(&str, f64)]) {
    for (name, per) in results {
        eprintln!("{name}: {per:.4} allocations per message");
    }
    for (name, per) in results {
        assert!(*per < BOUND, "{name}: {per} allocations per message");
    }
}

/// A local daemon's service on a runtime of its own (this process counts its
/// allocations too: the daemon side of every message is measured with the client's).
fn local_daemon() -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("iwarpd-alloc-{}.sock", std::process::id()));
    iwarpd::local::LocalService::start(
        &path,
        offload_engine::EngineConfig::default(),
        iwarpd::local::LocalConfig::default(),
        1,
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_local_daemon_nothing_is_allocated_per_message_either() {
    let _one = ONE_AT_A_TIME.lock().await;
    let path = local_daemon();
    let client = Host::new(verbs::DeviceConfig::default().daemon(&path));
    let server = Host::new(verbs::DeviceConfig::default().embedded());
    let (c, s) = connect(&client, &server, b"", b"").await;
    let src = c.pd().alloc_mr(4096, ALL).unwrap();
    let target = s.pd().alloc_mr(4096, ALL).unwrap();
    // Batches go through the send queue ring; an awaited Write alone is pushed, its
    // gather list copied into the slot and, in the daemon, into the payload arena.
    let write = || SendOp::Write {
        data: Payload::Sgl(src.local(..64).into()),
        dst: target.remote().slice(0, 64),
    };
    let results = [
        (
            "daemon: RDMA Write 64 B",
            per_message(&c, write, None).await,
        ),
        (
            "daemon: awaited RDMA Write 64 B, pushed",
            awaited(&c, write).await,
        ),
    ];
    assert!(
        c.qp.stats().push.executed > 0,
        "the awaited Writes were pushed"
    );
    check(&results);
}
