//! Tests of the push-push protocol: the indication packing, the control-message codec,
//! the credit rules, two sessions run against each other without IO (flush ordering,
//! credits, no deadlock), and one small run over loopback.

use std::collections::VecDeque;

use super::credit::{MsgCredits, RemotePool};
use super::indicate::{Immediate, Indication, fits_idata};
use super::session::{Action, Event, Inbound, Indicator, Plan, Session};
use super::wire::{Body, ERR_VERSION, Msg, PoolAdvert, VERSION, WireError};

fn advert(pool: u32, count: u32, size: u32) -> PoolAdvert {
    PoolAdvert {
        pool,
        stag: 0x100 * (pool + 1),
        to: 0,
        count,
        size,
    }
}

#[test]
fn idata_packs_8_8_16_and_round_trips() {
    let ind = Indication {
        pool: 7,
        element: 5,
        len: 256,
    };
    assert_eq!(ind.pack(), Some(0x0705_0100));
    assert_eq!(Indication::unpack(0x0705_0100), ind);
    let max = Indication {
        pool: 255,
        element: 255,
        len: 0xFFFF,
    };
    assert_eq!(Indication::unpack(max.pack().unwrap()), max);
    for too_wide in [(256, 0, 0), (0, 256, 0), (0, 0, 0x1_0000)] {
        let (pool, element, len) = too_wide;
        let ind = Indication { pool, element, len };
        assert_eq!(ind.pack(), None, "{ind:?} does not fit 32 bits");
    }
    let imm = Immediate {
        idata: 0x0705_0100,
        grant: 3,
    };
    assert_eq!(imm.to_u64(), 0x0003_0705_0100);
    assert_eq!(Immediate::from_u64(imm.to_u64()), Some(imm));
    assert_eq!(Immediate::from_u64(1 << 48), None, "reserved bits");
}

#[test]
fn idata_limits() {
    assert!(fits_idata(256, 256, 0xFFFF));
    assert!(!fits_idata(257, 1, 1), "more than 256 pools");
    assert!(!fits_idata(1, 257, 1), "more than 256 elements");
    assert!(!fits_idata(1, 1, 0x1_0000), "elements over 65535 octets");
}

/// The first push of a session whose peer advertised `pools`.
fn first_push(pools: Vec<PoolAdvert>, seed: u64) -> Indicator {
    let plan = Plan {
        messages: 1,
        seed,
        flush_pool: None,
    };
    let mut s = Session::new(plan, vec![], 8);
    assert!(matches!(s.next_action(), Ok(Action::Send(_))), "advert");
    let hello = Msg::new(Body::RecvPool(pools));
    s.on_inbound(Inbound::Message(Ok(hello))).unwrap();
    match s.next_action() {
        Ok(Action::Push { indicator, .. }) => indicator,
        other => panic!("expected a push, got {other:?}"),
    }
}

#[test]
fn limits_force_the_indicate_message() {
    let size = super::traffic::MAX_LEN;
    assert!(matches!(
        first_push(vec![advert(0, 4, size)], 9),
        Indicator::Message(Msg {
            body: Body::Indicate(_),
            ..
        })
    ));
    assert!(matches!(
        first_push(vec![advert(0, 300, size)], 9),
        Indicator::Message(_)
    ));
    // 65535-octet elements, 256 of them: immediate data (if the message fits 64 KiB).
    let seed = (0..)
        .find(|&s| super::traffic::message_len(s, 0) <= 0xFFFF)
        .unwrap();
    match first_push(vec![advert(0, 256, 0xFFFF)], seed) {
        Indicator::Immediate(v) => {
            let ind = Indication::unpack(Immediate::from_u64(v).unwrap().idata);
            assert_eq!((ind.pool, ind.element), (0, 0));
            assert_eq!(ind.len, super::traffic::message_len(seed, 0));
        }
        other => panic!("expected immediate data, got {other:?}"),
    }
}

fn every_body() -> Vec<Body> {
    vec![
        Body::RecvPool(vec![advert(0, 64, 256), advert(1, 8, 98304)]),
        Body::PoolUpdate(vec![(0, 32), (2, 4)]),
        Body::FlushRequest(vec![1, 2]),
        Body::FlushReply,
        Body::Indicate(Indication {
            pool: 2,
            element: 7,
            len: 70000,
        }),
        Body::Credit,
        Body::Done {
            messages: 1000,
            bytes: 1 << 33,
        },
        Body::Bye,
        Body::Error {
            code: ERR_VERSION,
            supported: VERSION,
        },
    ]
}

#[test]
fn control_messages_round_trip() {
    for body in every_body() {
        let msg = Msg {
            ctx: 0x0123_4567_89AB_CDEF,
            grant: 17,
            body,
        };
        let wire = msg.encode().unwrap();
        assert_eq!(&wire[..4], &[0, wire[1], 0, 1], "function | version 1");
        assert_eq!(&wire[4..12], &msg.ctx.to_be_bytes(), "context");
        assert_eq!(Msg::decode(&wire), Ok(msg));
    }
    let flush = Msg::new(Body::FlushRequest(vec![1])).encode().unwrap();
    assert_eq!(
        &flush[..],
        &[0, 3, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    let huge = Msg::new(Body::FlushRequest((0..100).collect()));
    assert!(matches!(huge.encode(), Err(WireError::TooLong { .. })));
}

#[test]
fn bad_control_messages_are_errors_not_panics() {
    let ok = Msg::new(Body::Done {
        messages: 1,
        bytes: 2,
    })
    .encode()
    .unwrap();
    for n in 0..ok.len() {
        assert!(Msg::decode(&ok[..n]).is_err(), "truncated to {n}");
    }
    let mut reserved = ok.to_vec();
    reserved[15] = 1;
    assert_eq!(Msg::decode(&reserved), Err(WireError::Reserved));
    let mut unknown = ok.to_vec();
    unknown[1] = 0x77;
    assert_eq!(Msg::decode(&unknown), Err(WireError::UnknownFunction(0x77)));
    let mut odd = Msg::new(Body::PoolUpdate(vec![(1, 2)]))
        .encode()
        .unwrap()
        .to_vec();
    odd.push(0);
    assert!(matches!(
        Msg::decode(&odd),
        Err(WireError::BadLength { .. })
    ));
    // Arbitrary octets: any answer but a panic.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..2000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let len = (x % 64) as usize;
        let mut junk: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
        if let Some(v) = junk.get_mut(3) {
            *v = 1; // version 1 often, to reach the body parsers
        }
        let _ = Msg::decode(&junk);
    }
}

#[test]
fn unsupported_version_gets_an_error_reply_echoing_the_context() {
    let mut s = Session::new(
        Plan {
            messages: 0,
            seed: 1,
            flush_pool: None,
        },
        vec![],
        8,
    );
    assert!(matches!(s.next_action(), Ok(Action::Send(_))), "advert");
    let req = Msg {
        ctx: 0xC0FFEE,
        grant: 0,
        body: Body::FlushRequest(vec![0]),
    };
    let wire = req.encode_version(VERSION + 1).unwrap();
    let decoded = Msg::decode(&wire);
    assert_eq!(
        decoded,
        Err(WireError::Version {
            version: VERSION + 1,
            ctx: 0xC0FFEE
        })
    );
    assert_eq!(s.on_inbound(Inbound::Message(decoded)), Ok(Event::Nothing));
    match s.next_action() {
        Ok(Action::Send(m)) => {
            assert_eq!(m.ctx, 0xC0FFEE);
            assert_eq!(
                m.body,
                Body::Error {
                    code: ERR_VERSION,
                    supported: VERSION
                }
            );
        }
        other => panic!("expected the error reply, got {other:?}"),
    }
}

#[test]
fn credit_rules() {
    let mut c = MsgCredits::new(3);
    assert_eq!((c.take(), c.take()), (Some(0), Some(0)));
    assert_eq!(c.take(), None, "the last credit needs a grant to carry");
    c.reposted();
    assert!(!c.grant_due(), "one owed credit does not deserve a message");
    assert_eq!(c.take(), Some(1), "now it carries one");
    assert_eq!(c.take(), None);
    c.reposted();
    c.reposted();
    assert!(c.grant_due());
    c.granted(3).unwrap();
    assert!(c.granted(1).is_err(), "more credits than receive buffers");

    let mut p = RemotePool::new(advert(0, 3, 16));
    let got: Vec<_> = std::iter::from_fn(|| p.acquire()).collect();
    assert_eq!(got, [0, 1, 2], "ring order, never more than advertised");
    assert!(p.returned(4).is_err(), "returning more than outstanding");
    p.returned(2).unwrap();
    assert_eq!(
        (p.acquire(), p.acquire(), p.acquire()),
        (Some(0), Some(1), None)
    );
}

/// Two sessions joined by in-memory queues: what each writer hands out is delivered to
/// the other side in bursts of varying size. Checks every rule the peer side can see.
fn pump(messages: u64, depth: u32) -> [Session; 2] {
    let local = || {
        vec![
            advert(0, 8, 256),
            advert(1, 4, 4096),
            advert(2, 2, 96 << 10),
        ]
    };
    let plan = |seed| Plan {
        messages,
        seed,
        flush_pool: Some(1),
    };
    let mut s = [
        Session::new(plan(1), local(), depth),
        Session::new(plan(2), local(), depth),
    ];
    let mut wire: [VecDeque<Inbound>; 2] = Default::default();
    let mut posted = [depth; 2]; // receive buffers free at each side
    let mut finished = [false; 2];
    let mut replied = [false; 2]; // a side sent its FlushReply
    let mut deregistered = [false; 2];
    // Elements each side wrote into and has not had returned yet, per peer pool.
    let mut busy: [[VecDeque<u64>; 3]; 2] = Default::default();
    let mut rng = 0x9E37_79B9u32;
    for _round in 0..100_000 {
        for me in 0..2 {
            let peer = 1 - me;
            while !finished[me] {
                let mut send = |inbound| {
                    // The fatal DDP error iWARP would raise: no receive buffer posted.
                    assert!(posted[peer] > 0, "side {me} sent with no receive posted");
                    posted[peer] -= 1;
                    wire[peer].push_back(inbound);
                };
                match s[me].next_action().unwrap() {
                    Action::Send(m) => {
                        replied[me] |= m.body == Body::FlushReply;
                        send(Inbound::Message(Msg::decode(&m.encode().unwrap())));
                    }
                    Action::Push { dst, indicator, .. } => {
                        let pool = (dst.stag.to_u32() / 0x100 - 1) as usize;
                        let held = &mut busy[me][pool];
                        assert!(
                            !held.contains(&dst.to) && held.len() < local()[pool].count as usize,
                            "side {me} wrote into an element of pool {pool} still consumed"
                        );
                        held.push_back(dst.to);
                        let flushed_stag = advert(1, 0, 0).stag;
                        assert!(
                            !(replied[me] && dst.stag.to_u32() == flushed_stag),
                            "side {me} wrote into the pool it acknowledged flushed"
                        );
                        send(match indicator {
                            Indicator::Immediate(v) => Inbound::Immediate(v),
                            Indicator::Message(m) => Inbound::Message(Ok(m)),
                        });
                    }
                    Action::Wait => break,
                    Action::Finished => finished[me] = true,
                }
            }
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            for _ in 0..(rng >> 28) + 1 {
                let Some(inbound) = wire[me].pop_front() else {
                    break;
                };
                posted[me] += 1;
                if let Inbound::Message(Ok(Msg {
                    body: Body::PoolUpdate(updates),
                    ..
                })) = &inbound
                {
                    for &(pool, n) in updates {
                        busy[me][pool as usize].drain(..n as usize);
                    }
                }
                s[me].reposted();
                match s[me].on_inbound(inbound).unwrap() {
                    Event::Data { pool, .. } => s[me].consumed(pool),
                    Event::Deregister(pool) => {
                        assert_eq!(pool, 1);
                        deregistered[me] = true;
                    }
                    Event::Nothing => {}
                }
            }
        }
        if finished == [true; 2] && s.iter().all(Session::peer_bye) {
            assert_eq!(deregistered, [true; 2], "both flushes completed");
            assert!(wire.iter().all(VecDeque::is_empty), "nothing after Bye");
            return s;
        }
    }
    panic!("no progress: the sessions deadlocked: {s:#?} {wire:?}");
}

#[test]
fn flush_ordering_and_credits_without_io() {
    for (messages, depth) in [(300, 32), (200, 4), (60, 3), (1, 8), (0, 3)] {
        let s = pump(messages, depth);
        for (me, peer) in [(0, 1), (1, 0)] {
            assert_eq!(s[me].stats.sent, messages);
            assert_eq!(s[peer].stats.received, messages);
            assert_eq!(s[me].stats.bytes_sent, s[peer].stats.bytes_received);
        }
        if messages > 100 {
            assert!(s[0].stats.element_stalls > 0, "small pools must stall");
            assert!(s[0].stats.indicate_msgs > 0 && s[0].stats.idata > 0);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_run_verifies_every_message() {
    let (a, b) = super::loopback(&verbs::DeviceConfig::default(), 60)
        .await
        .unwrap();
    for s in [a, b] {
        assert_eq!((s.sent, s.received), (60, 60));
        assert!(s.idata > 0, "immediate-data indications used");
    }
    assert_eq!(a.bytes_sent, b.bytes_received);
    assert_eq!(b.bytes_sent, a.bytes_received);
}
