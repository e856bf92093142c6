//! The body of `ipc_wqe`: the fixed-size entries of the rings (send, receive and
//! completion entries) as a client (or, for completions, a daemon) may write them.
//!
//! Input: a selector octet (`% 4`: send entry, receive entry, completion entry, all three
//! from the same octets), a staging octet (the staging area is `64 * s` octets), the
//! entry's 256 octets (zero-padded), then the staging area's contents (repeated to fill
//! it).
//!
//! Invariants: no decoder panics. [`decode_sqe`] hands its `own` callback at most one
//! payload: an inline one exactly as long as the entry says and at most
//! [`INLINE_MAX`](ipc::wqe::INLINE_MAX), or a staged claim exactly as the entry states it
//! (the decoder allocates nothing for a claim; the callback checks it against the area,
//! and the target runs with a small `-malloc_limit_mb`). A request that decodes encodes
//! again (its payload inline or staged as its length requires) to an entry that decodes
//! to the same request; marking the entry pushed changes nothing of what it decodes to;
//! replacing a Send's or Write's payload by inline octets ([`set_inline`]) changes only
//! the payload. Receive and completion entries that decode encode to the same defined
//! octets and decode to the same value.

use bytes::Bytes;
use ipc::wqe::{
    CQE_SIZE, Data, INLINE_MAX, RQ_SGES, RQE_SIZE, SQE_SIZE, copy_inline, decode_cqe, decode_rqe,
    decode_sqe, encode_cqe, encode_rqe, encode_sqe, mark_pushed, set_inline,
};
use rdmap::{Payload, SendOp, SendWr};

fn get32(e: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

/// Runs one input (see the module documentation).
pub fn run_entries(data: &[u8]) {
    let (sel, rest) = crate::take_byte(data);
    let (st, rest) = crate::take_byte(rest);
    let mut e = [0u8; SQE_SIZE];
    let n = rest.len().min(SQE_SIZE);
    e[..n].copy_from_slice(&rest[..n]);
    let fill = &rest[n..];
    let staging: Vec<u8> = if fill.is_empty() {
        vec![0; 64 * usize::from(st)]
    } else {
        fill.iter()
            .copied()
            .cycle()
            .take(64 * usize::from(st))
            .collect()
    };
    match sel % 4 {
        0 => send_entry(&e, &staging),
        1 => recv_entry(&e),
        2 => completion(&cqe_of(&e)),
        _ => {
            send_entry(&e, &staging);
            recv_entry(&e);
            completion(&cqe_of(&e));
        }
    }
}

fn cqe_of(e: &[u8; SQE_SIZE]) -> [u8; CQE_SIZE] {
    let mut c = [0u8; CQE_SIZE];
    c.copy_from_slice(&e[..CQE_SIZE]);
    c
}

/// What `own` was handed.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Owned {
    Nothing,
    Inline(usize),
    Staged { offset: u32, len: u32 },
}

/// Decodes `e` with an `own` that checks what it is handed and copies from `staging`.
fn decode_checked(e: &[u8; SQE_SIZE], staging: &[u8]) -> (Result<SendWr, ipc::Malformed>, Owned) {
    let mut seen = Owned::Nothing;
    let mut calls = 0;
    let r = decode_sqe(e, &mut |d| {
        calls += 1;
        match d {
            Data::Inline(b) => {
                assert!(b.len() <= INLINE_MAX, "inline payload of {}", b.len());
                assert_eq!(b.len() as u32, get32(e, 4), "inline length");
                assert_eq!(b, &e[96..96 + b.len()], "inline octets");
                seen = Owned::Inline(b.len());
                Some(Bytes::copy_from_slice(b))
            }
            Data::Staged { offset, len } => {
                assert_eq!((offset, len), (get32(e, 72), get32(e, 4)), "staged claim");
                seen = Owned::Staged { offset, len };
                let end = u64::from(offset) + u64::from(len);
                (end <= staging.len() as u64)
                    .then(|| Bytes::copy_from_slice(&staging[offset as usize..end as usize]))
            }
        }
    });
    assert!(calls <= 1, "own called {calls} times for one entry");
    (r, seen)
}

fn send_entry(e: &[u8; SQE_SIZE], staging: &[u8]) {
    let (r, seen) = decode_checked(e, staging);
    // The library's helper takes no staged payload, and agrees otherwise.
    let plain = decode_sqe(e, &mut copy_inline);
    if !matches!(seen, Owned::Staged { .. }) {
        assert_eq!(plain, r, "copy_inline");
    }
    // The pushed mark is not part of the request.
    let mut pushed = *e;
    mark_pushed(&mut pushed);
    assert_eq!(decode_checked(&pushed, staging).0, r, "marked pushed");
    let Ok(wr) = r else { return };
    assert_eq!(wr.wr_id, u64::from_le_bytes(e[8..16].try_into().unwrap()));
    // Round trip: inline when short, staged (at offset 64 here) when long.
    let mut staged: Option<Vec<u8>> = None;
    let enc = encode_sqe(&wr, &mut |b| {
        assert!(b.len() > INLINE_MAX, "a short payload staged");
        staged = Some(b.to_vec());
        Some(64)
    })
    .expect("a decoded request encodes");
    let back = decode_sqe(&enc, &mut |d| match d {
        Data::Inline(b) => Some(Bytes::copy_from_slice(b)),
        Data::Staged { offset, len } => {
            let s = staged.as_ref().expect("staged by encode");
            assert_eq!((offset, len as usize), (64, s.len()));
            Some(Bytes::copy_from_slice(s))
        }
    })
    .expect("our own entry decodes");
    assert_eq!(back, wr, "send entry round trip");
    // The pushed message of a request with a gather list: its payload inline.
    let inline: &[u8] = &e[96..96 + usize::from(e[3]).min(INLINE_MAX)];
    let mut twin = *e;
    if set_inline(&mut twin, inline) {
        let want = match wr.op.clone() {
            SendOp::Send {
                invalidate,
                immediate,
                ..
            } => SendOp::Send {
                data: Payload::Bytes(Bytes::copy_from_slice(inline)),
                invalidate,
                immediate,
            },
            SendOp::Write { dst, .. } => SendOp::Write {
                data: Payload::Bytes(Bytes::copy_from_slice(inline)),
                dst,
            },
            other => panic!("set_inline took {other:?}"),
        };
        let got = decode_sqe(&twin, &mut copy_inline).expect("an inline twin decodes");
        assert_eq!(got, SendWr { op: want, ..wr }, "set_inline");
    } else {
        assert!(!matches!(e[0], 1 | 2), "set_inline refused a Send or Write");
    }
}

fn recv_entry(e: &[u8; RQE_SIZE]) {
    let Ok(wr) = decode_rqe(e) else {
        assert!(usize::from(e[8]) > RQ_SGES, "a receive entry refused");
        return;
    };
    let n = wr.sgl.len();
    assert_eq!(n, usize::from(e[8]));
    let enc = encode_rqe(&wr).expect("a decoded receive encodes");
    assert_eq!(enc[..9], e[..9]);
    assert!(enc[9..16].iter().all(|&b| b == 0));
    assert_eq!(enc[16..16 + 16 * n], e[16..16 + 16 * n]);
    assert!(enc[16 + 16 * n..].iter().all(|&b| b == 0));
    assert_eq!(decode_rqe(&enc), Ok(wr), "receive entry round trip");
}

fn completion(c: &[u8; CQE_SIZE]) {
    let Ok(wc) = decode_cqe(c) else { return };
    let enc = encode_cqe(&wc);
    assert_eq!(enc[..11], c[..11], "id, queue, opcode, status");
    let flags = c[11] & 0x3f;
    assert_eq!(enc[11], flags, "defined flags");
    assert_eq!(enc[12..16], c[12..16], "octets");
    for (bit, range) in [
        (0x01, 16..20),
        (0x10, 20..22),
        (0x04, 24..32),
        (0x08, 32..40),
    ] {
        if flags & bit != 0 {
            assert_eq!(enc[range.clone()], c[range], "field of flag {bit:#x}");
        }
    }
    assert_eq!(decode_cqe(&enc), Ok(wc), "completion round trip");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmap::{Completion, Queue, RemoteBuf, STag, SendFlags, Sge, WcOpcode, WcStatus};

    fn input(sel: u8, st: u8, e: &[u8], staging: &[u8]) -> Vec<u8> {
        let mut v = vec![sel, st];
        let mut entry = [0u8; SQE_SIZE];
        entry[..e.len()].copy_from_slice(e);
        v.extend_from_slice(&entry);
        v.extend_from_slice(staging);
        v
    }

    #[test]
    fn a_staged_send_and_a_gather_write_round_trip() {
        let send = SendWr {
            wr_id: 5,
            op: SendOp::Send {
                data: Payload::Bytes(Bytes::from(vec![9u8; 300])),
                invalidate: Some(STag::from_u32(0x101)),
                immediate: None,
            },
            flags: SendFlags::SIGNALED,
        };
        let e = encode_sqe(&send, &mut |_| Some(0)).unwrap();
        // Staging of 64 * 5 = 320 octets of 9s: the claim fits.
        run_entries(&input(0, 5, &e, &[9]));
        assert!(decode_checked(&e, &[9; 320]).0.is_ok());
        // Of 256: it does not (and nothing panics).
        assert!(decode_checked(&e, &[9; 256]).0.is_err());
        run_entries(&input(0, 4, &e, &[9]));
        let write = SendWr {
            wr_id: 6,
            op: SendOp::Write {
                data: Payload::Sgl(
                    [Sge {
                        stag: STag::from_u32(0x201),
                        to: 8,
                        len: 16,
                    }]
                    .into(),
                ),
                dst: RemoteBuf {
                    stag: STag::from_u32(0x301),
                    to: 0,
                    len: 16,
                },
            },
            flags: SendFlags::NONE,
        };
        run_entries(&input(
            3,
            0,
            &encode_sqe(&write, &mut |_| None).unwrap(),
            &[],
        ));
    }

    #[test]
    fn receive_and_completion_entries_round_trip() {
        let rwr = rdmap::RecvWr {
            wr_id: 1,
            sgl: [Sge {
                stag: STag::from_u32(0x101),
                to: 0,
                len: 64,
            }]
            .into(),
        };
        run_entries(&input(1, 0, &encode_rqe(&rwr).unwrap(), &[]));
        let mut wc = Completion::new(3, Queue::Recv, WcOpcode::Recv, WcStatus::Success);
        wc.byte_len = 64;
        wc.immediate = Some(7);
        let mut c = encode_cqe(&wc).to_vec();
        c[11] |= 0xc0; // undefined flags are ignored
        run_entries(&input(2, 0, &c, &[]));
    }
}
