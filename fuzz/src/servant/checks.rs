//! The checks beside the fuzzed queue pair: the honest queue pair's Write and Read back,
//! and the resources of the daemon, the peer and the process, which must not grow.

use std::time::{Duration, Instant};

use ipc::control::{Reply, Request};
use ipc::wqe::{decode_cqe, encode_sqe};
use rdmap::{Payload, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcStatus};

use super::{Harness, raw};
use crate::rings::layout::SQ_PROD;

/// Descriptors and memory files the process may hold beyond its baseline.
const FD_MARGIN: usize = 64;
const FILE_MARGIN: usize = 16;

impl Harness {
    /// The honest queue pair writes 512 octets to its region at the peer and reads them
    /// back: both must complete with success, and the octets read be the ones written.
    pub fn honest_check(&mut self) {
        let round = self.tally.honest;
        let pattern: Vec<u8> = (0..512u32)
            .map(|i| (i as u8).wrapping_mul(31) ^ round as u8)
            .collect();
        let h = &self.honest;
        h.region.write(0, &pattern);
        h.region.write(4096, &[0; 512]);
        let remote = RemoteBuf {
            len: 512,
            ..self.peer.honest_region
        };
        let local = |to| Sge {
            stag: STag::from_u32(h.stag),
            to,
            len: 512,
        };
        let write = SendWr {
            wr_id: 2 * round,
            op: SendOp::Write {
                data: Payload::Sgl([local(0)].into()),
                dst: remote,
            },
            flags: SendFlags::SIGNALED,
        };
        let read = SendWr {
            wr_id: 2 * round + 1,
            op: SendOp::Read {
                src: remote,
                dst: local(4096),
            },
            flags: SendFlags::SIGNALED,
        };
        let qp = &mut self.honest_qp;
        let prod = qp.word(SQ_PROD);
        for (i, wr) in [write, read].iter().enumerate() {
            let e = encode_sqe(wr, &mut |_| None).expect("encode");
            qp.seg.write(qp.sq_at(prod.wrapping_add(i as u32)), &e);
        }
        qp.set(SQ_PROD, prod.wrapping_add(2));
        qp.ring();
        let until = Instant::now() + raw::REPLY_WAIT;
        let mut got = Vec::new();
        while got.len() < 2 {
            match qp.view.cq_pop() {
                Ok(Some(e)) => got.push(decode_cqe(&e).expect("honest completion")),
                Ok(None) => {
                    assert!(
                        Instant::now() < until,
                        "the honest queue pair's Write and Read did not complete within \
                         {:?} (after {} inputs): {got:?}",
                        raw::REPLY_WAIT,
                        self.tally.inputs
                    );
                    if let Some(ev) = self.honest.raw.event() {
                        panic!(
                            "the honest client got {ev:?} (after {} inputs)",
                            self.tally.inputs
                        );
                    }
                    std::thread::sleep(Duration::from_micros(50));
                }
                Err(_) => panic!("the honest queue pair's completion index is garbage"),
            }
        }
        for (wc, id) in got.iter().zip([2 * round, 2 * round + 1]) {
            assert_eq!(
                (wc.wr_id, wc.status),
                (id, WcStatus::Success),
                "honest {wc:?}"
            );
        }
        let mut back = vec![0u8; 512];
        self.honest.region.read(4096, &mut back);
        assert_eq!(
            back, pattern,
            "the honest Read returned other octets than written"
        );
        self.tally.honest += 1;
    }

    /// Checks that nothing grows per input: descriptors, memory files, queue pairs of
    /// the daemon and of the peer.
    pub(super) fn resources(&mut self) {
        let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
        let files = shm::memory_files();
        let (r, _) = self.fuzz.raw.call(&Request::Stats);
        let Reply::Stats(d) = r else {
            panic!("Stats: {r:?}")
        };
        let (conns, peer_qps) = self.peer.counts();
        let rss = std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map_or(0, |pages| (pages * 4096) >> 20);
        eprintln!(
            "iwarpd_servant resources after {} inputs: {fds} descriptors, {files} memory \
             files, daemon queue pairs {}, peer connections {conns} (engine {peer_qps}), \
             RSS {rss} MiB",
            self.tally.inputs, d.device_queue_pairs
        );
        let (base_fds, base_files) = *self.baseline.get_or_insert((fds, files));
        assert!(
            fds <= base_fds + FD_MARGIN,
            "descriptors grew from {base_fds} to {fds} after {} inputs",
            self.tally.inputs
        );
        assert!(
            files <= base_files + FILE_MARGIN,
            "memory files grew from {base_files} to {files} after {} inputs",
            self.tally.inputs
        );
        assert!(
            d.device_queue_pairs <= 8,
            "iwarpd holds {} queue pairs; this harness has at most 2",
            d.device_queue_pairs
        );
        assert!(
            conns <= 8 && peer_qps <= 16,
            "the peer holds {conns} connections, {peer_qps} queue pairs"
        );
    }
}
