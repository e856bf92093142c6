//! Hand-made first inputs of the daemon's targets, written to `fuzz/seeds/TARGET/` by
//!
//! ```sh
//! cargo test --manifest-path fuzz/Cargo.toml --lib -- --ignored write_seeds
//! ```
//!
//! (`scripts/fuzz_all.sh` hands that directory to libFuzzer beside the corpus). Each is a
//! structure a mutation of random octets reaches only slowly: a request that decodes and
//! is steered at registered memory, a pushed twin, receives a message lands in.

use bytes::Bytes;
use ipc::control::{Event, QueueDepths, Reply, Request, func};
use ipc::wqe::{encode_cqe, encode_rqe, encode_sqe};
use rdmap::{
    Completion, Payload, Queue, RecvWr, RemoteBuf, STag, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};

fn sge(len: u32) -> Sge {
    Sge {
        stag: STag::from_u32(0x101),
        to: 0,
        len,
    }
}

fn remote(len: u32) -> RemoteBuf {
    RemoteBuf {
        stag: STag::from_u32(0x201),
        to: 64,
        len,
    }
}

fn wr(wr_id: u64, op: SendOp) -> SendWr {
    SendWr {
        wr_id,
        op,
        flags: SendFlags::SIGNALED,
    }
}

/// A send entry, a staged payload at offset 0 of the staging area.
fn sqe(w: &SendWr) -> [u8; 256] {
    encode_sqe(w, &mut |_| Some(0)).expect("encode")
}

/// Inputs of `iwarpd_servant` (see `servant`'s module documentation for the format).
pub(crate) fn servant() -> Vec<(&'static str, Vec<u8>)> {
    // op 0 with `fix`.
    let op0 = |fix: u8, w: &SendWr| {
        let mut v = vec![0, fix];
        v.extend_from_slice(&sqe(w));
        v
    };
    let recv = {
        let r = RecvWr {
            wr_id: 9,
            sgl: [sge(4096)].into(),
        };
        let mut v = vec![1, 2];
        v.extend_from_slice(&encode_rqe(&r).expect("encode"));
        v
    };
    let srq_recv = {
        let mut v = recv.clone();
        v[0] = 2;
        v
    };
    let sgl = |len| Payload::Sgl([sge(len)].into());
    let steer = 2 | 4 | 8;
    let write = wr(
        1,
        SendOp::Write {
            data: sgl(64),
            dst: remote(64),
        },
    );
    let inline_write = wr(
        2,
        SendOp::Write {
            data: Payload::Bytes(Bytes::from_static(b"pushed")),
            dst: remote(6),
        },
    );
    let read = wr(
        3,
        SendOp::Read {
            src: remote(512),
            dst: sge(512),
        },
    );
    let fetch_add = wr(
        4,
        SendOp::FetchAdd {
            dst: RemoteBuf {
                len: 8,
                ..remote(8)
            },
            add: 1,
            mask: 0,
            result: sge(8),
        },
    );
    let send = wr(
        5,
        SendOp::Send {
            data: Payload::Bytes(Bytes::from_static(b"echo me")),
            invalidate: None,
            immediate: Some(7),
        },
    );
    let staged_send = wr(
        6,
        SendOp::Send {
            data: Payload::Bytes(Bytes::from(vec![0x11; 600])),
            invalidate: None,
            immediate: None,
        },
    );
    let cat = |parts: &[&[u8]]| parts.concat();
    vec![
        ("write", cat(&[&[0], &op0(steer, &write)])),
        (
            "pushed-write",
            cat(&[&[0], &op0(steer | 0x80, &inline_write)]),
        ),
        ("read", cat(&[&[0], &op0(steer, &read)])),
        ("fetch-add", cat(&[&[0], &op0(steer, &fetch_add)])),
        (
            "send-echoed",
            cat(&[&[0], &recv, &recv, &op0(steer, &send), &[7]]),
        ),
        (
            "staged-send",
            cat(&[
                &[0, 3, 0, 0, 255],
                &[0x11; 255],
                &op0(steer, &staged_send),
                &recv,
            ]),
        ),
        (
            "peer-sends-to-srq",
            cat(&[&[1], &srq_recv, &srq_recv, &[9, 1, 0, 1, 0]]),
        ),
        ("peer-sends-to-rq", cat(&[&[4], &recv, &[9, 0, 100, 0, 2]])),
        (
            "control",
            vec![0, 8, 0, 1, 8, 1, 1, 8, 2, 0, 8, 3, 0, 8, 6, 0],
        ),
        ("push-slot", {
            let mut v = vec![0, 4, 0, 0, 0, steer];
            v.extend_from_slice(&sqe(&inline_write));
            v
        }),
        ("garbage", cat(&[&[0, 0, 0], &[0xff; 256]])),
    ]
}

/// Inputs of `ipc_control`.
fn control() -> Vec<(&'static str, Vec<u8>)> {
    // Chunks of at most 255 octets, the descriptors `d` with the first.
    let chunk = |d: u8, m: &[u8]| {
        let mut v = Vec::new();
        for (i, c) in m.chunks(255).enumerate() {
            v.extend([if i == 0 { d } else { 0 }, c.len() as u8]);
            v.extend_from_slice(c);
        }
        v
    };
    let reg = Request::RegMr {
        pd: 1,
        access: 0x0f,
        va: Some(0x1000),
        len: 4096,
        offset: 0,
    }
    .encode(1);
    let connect = Request::Connect {
        pd: 1,
        srq: 2,
        depths: QueueDepths { sq: 16, rq: 16 },
        addr: "127.0.0.1:4791".parse().expect("address"),
        private: Bytes::from_static(b"x"),
        recvs: vec![RecvWr {
            wr_id: 1,
            sgl: [sge(64)].into(),
        }],
        rtr: 0,
    }
    .encode(2);
    let pd = Reply::Pd {
        pd: 1,
        push_slots: 32,
    }
    .encode(func::ALLOC_PD, 3);
    let ended = Event::QpEnded {
        qp: 1,
        how: 2,
        term: [0x12, 0x03],
    }
    .encode();
    vec![
        (
            "registration-split",
            [vec![0], chunk(1, &reg[..7]), chunk(0, &reg[7..])].concat(),
        ),
        ("connect", [vec![0], chunk(0, &connect)].concat()),
        (
            "reply-and-event",
            [vec![3], chunk(1, &pd), chunk(0, &ended)].concat(),
        ),
    ]
}

/// Inputs of `ipc_wqe`.
fn entries() -> Vec<(&'static str, Vec<u8>)> {
    let staged = wr(
        1,
        SendOp::Send {
            data: Payload::Bytes(Bytes::from(vec![3; 300])),
            invalidate: Some(STag::from_u32(0x301)),
            immediate: None,
        },
    );
    let mut wc = Completion::new(5, Queue::Recv, WcOpcode::RecvImmediate, WcStatus::Success);
    wc.immediate = Some(1);
    wc.byte_len = 10;
    let rqe = encode_rqe(&RecvWr {
        wr_id: 2,
        sgl: [sge(16), sge(32)].into(),
    })
    .expect("encode");
    let with = |sel: u8, st: u8, e: &[u8]| {
        let mut v = vec![sel, st];
        let mut entry = [0u8; 256];
        entry[..e.len()].copy_from_slice(e);
        v.extend_from_slice(&entry);
        v.push(3);
        v
    };
    vec![
        ("staged-send", with(0, 8, &sqe(&staged))),
        ("receive", with(1, 0, &rqe)),
        ("completion", with(2, 0, &encode_cqe(&wc))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the seeds (see the module documentation).
    #[test]
    #[ignore]
    fn write_seeds() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
        for (target, seeds) in [
            ("iwarpd_servant", servant()),
            ("ipc_control", control()),
            ("ipc_wqe", entries()),
        ] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).expect("mkdir");
            for (name, input) in seeds {
                std::fs::write(dir.join(name), input).expect("write a seed");
            }
        }
    }

    /// The seeds run clean through their targets.
    #[test]
    fn seeds_pass() {
        for (name, input) in control() {
            assert!(crate::run_control(&input) > 0, "{name}");
        }
        for (_, input) in entries() {
            crate::run_entries(&input);
        }
    }
}
