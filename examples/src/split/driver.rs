//! One side over verbs: registers its pools and receive buffers ([`Side::new`]), then
//! runs the [`Session`] on a connected queue pair ([`Side::run`]): a writer that
//! executes [`Action`]s and a receiver that feeds completions back, in one task.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use verbs::{Access, Cq, Mr, Pd, Qp, QpConfig, RecvWr};

use super::session::{Action, Event, Inbound, Indicator, Plan, Session, Stats};
use super::traffic::payload;
use super::wire::{MAX_MSG, Msg, PoolAdvert};
use crate::{Error, step};

/// Receive buffers each side posts before connecting: the receive credits each way.
pub const RECV_DEPTH: u32 = 32;

/// The pools each side advertises, `(elements, element size)`: small and medium ones
/// indicated by immediate data, and one of 96 KiB elements, too large for its 16-bit
/// length, indicated by BufferRDMAIndicate messages.
pub const POOLS: [(u32, u32); 3] = [(64, 256), (32, 4096), (8, 96 << 10)];

/// The pool flushed halfway through (its messages then go to the next larger pool).
pub const FLUSHED_POOL: u32 = 1;

/// How long the protocol may make no progress before the run fails.
const STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One side: its registered memory and its messaging-layer state.
#[derive(Debug)]
pub struct Side {
    session: Mutex<Session>,
    /// Registered pools by pool reference; `None` once deregistered after a flush.
    pools: Vec<Option<Mr>>,
    inbox: Mr,
    cq: Cq,
    seed: u64,
    peer_seed: u64,
}

impl Side {
    /// Registers [`POOLS`] and the receive buffers in `pd`. We push `messages` messages
    /// of stream `seed`; the peer pushes stream `peer_seed`.
    pub fn new(pd: &Pd, messages: u64, seed: u64, peer_seed: u64) -> Result<Self, Error> {
        let mut pools = Vec::new();
        let mut adverts = Vec::new();
        for (pool, (count, size)) in (0..).zip(POOLS) {
            let mr = pd.alloc_mr(
                count as usize * size as usize,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )?;
            adverts.push(PoolAdvert {
                pool,
                stag: mr.stag().to_u32(),
                to: mr.to(),
                count,
                size,
            });
            pools.push(Some(mr));
        }
        let plan = Plan {
            messages,
            seed,
            flush_pool: Some(FLUSHED_POOL),
        };
        Ok(Self {
            session: Mutex::new(Session::new(plan, adverts, RECV_DEPTH)),
            pools,
            inbox: pd.alloc_mr(RECV_DEPTH as usize * MAX_MSG, Access::LOCAL_WRITE)?,
            cq: pd.device().create_cq(RECV_DEPTH as usize * 2),
            seed,
            peer_seed,
        })
    }

    /// The queue pair configuration: all receive buffers posted before any data flows.
    pub fn qp_config(&self) -> QpConfig {
        (0..u64::from(RECV_DEPTH)).fold(QpConfig::new(&self.cq), |cfg, slot| {
            cfg.recv(self.recv_wr(slot))
        })
    }

    fn recv_wr(&self, slot: u64) -> RecvWr {
        let at = slot as usize * MAX_MSG;
        RecvWr {
            wr_id: slot,
            sgl: [self.inbox.local(at..at + MAX_MSG)].into(),
        }
    }

    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        // A panic elsewhere cannot leave the session half-updated in a way that matters
        // here: the run fails anyway.
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs the protocol on `qp` until both sides said Bye; returns the counters.
    pub async fn run(mut self, qp: &Qp) -> Result<Stats, Error> {
        let wake = tokio::sync::Notify::new();
        let mut pools = std::mem::take(&mut self.pools);
        let this = &self;
        tokio::try_join!(this.write_loop(qp, &wake), async {
            while !this.session().peer_bye() {
                this.receive_one(qp, &mut pools).await?;
                wake.notify_one();
            }
            Ok::<_, Error>(())
        })?;
        Ok(self.session().stats)
    }

    /// The writer: every send of this side leaves from here, in session order.
    async fn write_loop(&self, qp: &Qp, wake: &tokio::sync::Notify) -> Result<(), Error> {
        loop {
            let action = self.session().next_action()?;
            match action {
                Action::Send(msg) => {
                    qp.send(msg.encode()?).await?;
                }
                Action::Push {
                    seq,
                    len,
                    dst,
                    indicator,
                } => {
                    qp.write(payload(self.seed, seq, len), dst).await?;
                    // Same queue pair, after the Write: placed before it is seen.
                    match indicator {
                        Indicator::Immediate(v) => qp.send_immediate(v).await?,
                        Indicator::Message(m) => qp.send(m.encode()?).await?,
                    };
                }
                Action::Wait => {
                    step(STALL_TIMEOUT, "credits from the peer", wake.notified()).await?
                }
                Action::Finished => return Ok(()),
            }
        }
    }

    /// The receiver: one completion, its buffer reposted, the session told.
    async fn receive_one(&self, qp: &Qp, pools: &mut [Option<Mr>]) -> Result<(), Error> {
        let wc = step(STALL_TIMEOUT, "a message from the peer", self.cq.next())
            .await??
            .wc;
        if !wc.is_ok() {
            let failed = verbs::WcError::Failed(Box::new(wc));
            return Err(format!("{failed}; the connection is gone").into());
        }
        let inbound = match wc.immediate {
            Some(v) => Inbound::Immediate(v),
            None => {
                let at = wc.wr_id as usize * MAX_MSG;
                let len = (wc.byte_len as usize).min(MAX_MSG);
                Inbound::Message(Msg::decode(&self.inbox.read(at..at + len)?))
            }
        };
        qp.post_recv(self.recv_wr(wc.wr_id))?;
        let event = {
            let mut s = self.session();
            s.reposted();
            s.on_inbound(inbound)?
        };
        match event {
            Event::Nothing => {}
            Event::Data {
                pool,
                offset,
                len,
                seq,
            } => {
                let mr = pools
                    .get(pool as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| format!("pool {pool} is deregistered"))?;
                let got = Bytes::from(mr.read(offset..offset + len as usize)?);
                if got != payload(self.peer_seed, seq, len) {
                    return Err(
                        format!("message {seq} ({len} octets in pool {pool}) is corrupt").into(),
                    );
                }
                self.session().consumed(pool);
            }
            Event::Deregister(pool) => {
                // The peer replied to the flush: it will not write here again.
                if let Some(mr) = pools.get_mut(pool as usize).and_then(Option::take) {
                    mr.deregister().await?;
                }
            }
        }
        Ok(())
    }
}
