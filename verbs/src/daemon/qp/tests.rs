//! The library's side of a daemon queue pair, against a segment this test writes as the
//! daemon would.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use cq::Cq;
use ipc::control::QueueDepths;
use ipc::qpseg::{Doorbell, Geometry, QpSegment};
use ipc::wqe::{encode_cqe, set_sq_done};
use rdmap::{Completion, QpNum, Queue, WcOpcode, WcStatus};

use super::{Drained, Outstanding, Routes, Shared};

/// A send completion that names its index frees the send queue entries before it when
/// the library reads it, though the daemon's `sq_done` word has not moved yet; one that
/// names none frees nothing beyond the word.
#[test]
fn a_drained_completion_retires_up_to_the_index_it_names() {
    let geo = Geometry {
        sq_depth: 4,
        rq_depth: 4,
        cq_depth: 8,
        staging: 64,
    };
    let daemon = QpSegment::create(geo).unwrap();
    let file = std::fs::File::from(daemon.fd().try_clone_to_owned().unwrap());
    let shared = Shared {
        consumer: Mutex::new(Drained::default()),
        num: QpNum(1),
        seg: QpSegment::map(file, geo).unwrap(),
        to_daemon: Doorbell::new().unwrap(),
        routes: Routes {
            send_cq: Cq::new(8),
            recv_cq: Cq::new(8),
            waiters: Arc::default(),
        },
        polls: AtomicU32::new(0),
        cqe_done: AtomicU32::new(0),
        awaited: Arc::default(),
        outstanding: Mutex::new(Outstanding {
            sends: VecDeque::new(),
            first_send: 0,
            recvs: VecDeque::new(),
            depths: QueueDepths { sq: 4, rq: 4 },
            dead: false,
        }),
    };
    let wc = Completion::new(7, Queue::Send, WcOpcode::Write, WcStatus::Success);
    assert!(daemon.cq_push(&encode_cqe(&wc)), "no index named");
    assert!(shared.drain());
    assert_eq!(shared.retired(), 0);
    let mut e = encode_cqe(&wc);
    set_sq_done(&mut e, 3);
    assert!(daemon.cq_push(&e));
    assert!(shared.drain());
    assert_eq!(daemon.sq_retired(), 0, "the word did not move");
    assert_eq!(shared.retired(), 3, "the completion's index counts");
    daemon.sq_retire(5);
    assert_eq!(shared.retired(), 5, "and the word, once it is ahead");
}
