//! The messaging layer of one side as a state machine without IO: the writer asks it
//! what to send next ([`Session::next_action`]), the receiver feeds it every completion
//! ([`Session::on_inbound`]). The driver (`driver.rs`) does the verbs calls.
//!
//! One queue pair carries everything (seed 002 FIG. 7 uses two channels; one suffices
//! here because iWARP tells a tagged RDMA Write from an untagged Send on the wire). All
//! sends leave from one writer in the order `next_action` hands them out, which is what
//! makes a FlushReply follow every write the replier made into the flushed pool.

use std::collections::VecDeque;

use verbs::RemoteBuf;

use super::credit::{MsgCredits, PoolLedger, PoolState, RemotePool};
use super::indicate::{Immediate, Indication, fits_idata};
use super::traffic::message_len;
use super::wire::{Body, ERR_VERSION, Msg, PoolAdvert, VERSION, WireError};

/// What this side pushes.
#[derive(Copy, Clone, Debug)]
pub struct Plan {
    /// Messages to push.
    pub messages: u64,
    /// The stream seed of our messages (see `traffic`).
    pub seed: u64,
    /// One of our pools to flush once half of our messages are out, if any.
    pub flush_pool: Option<u32>,
}

/// How an indication travels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Indicator {
    /// RFC 7306 Immediate Data with these 64 bits (see [`Immediate`]).
    Immediate(u64),
    /// A BufferRDMAIndicate Send.
    Message(Msg),
}

/// The writer's next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this control message.
    Send(Msg),
    /// RDMA Write message `seq` (`len` octets) to `dst`, then send the indication.
    Push {
        /// Sequence number of the message.
        seq: u64,
        /// Its length.
        len: u32,
        /// The pool element it goes to.
        dst: RemoteBuf,
        /// The indication that follows the Write.
        indicator: Indicator,
    },
    /// Nothing can go now: wait until the receiver delivered something.
    Wait,
    /// Bye is sent: this side sends nothing more.
    Finished,
}

/// What the receiver must do about a completion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Nothing more.
    Nothing,
    /// Message `seq` is in `pool` at `offset`, `len` octets: check it, then call
    /// [`Session::consumed`].
    Data {
        /// The pool reference.
        pool: u32,
        /// Octet offset in the pool's region.
        offset: usize,
        /// Octets.
        len: u32,
        /// Its sequence number.
        seq: u64,
    },
    /// The peer acknowledged the flush of `pool`: deregister its memory now.
    Deregister(u32),
}

/// A completion on the receive queue.
#[derive(Clone, Debug)]
pub enum Inbound {
    /// Immediate Data (an indication).
    Immediate(u64),
    /// A Send, decoded.
    Message(Result<Msg, WireError>),
}

/// Why the writer waits.
#[derive(Copy, Clone, Debug)]
enum Stall {
    /// No free element in the peer's pool.
    Elements,
    /// No receive credit.
    Credits,
}

/// Whether the next message can be pushed.
enum Data {
    /// Yes: this push.
    Go(Action),
    /// No; `None` while the peer's pools are not known yet.
    Blocked(Option<Stall>),
}

/// Counters for the summary.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages pushed.
    pub sent: u64,
    /// Octets pushed.
    pub bytes_sent: u64,
    /// Messages received and verified.
    pub received: u64,
    /// Octets received.
    pub bytes_received: u64,
    /// Indications sent as immediate data.
    pub idata: u64,
    /// Indications sent as BufferRDMAIndicate.
    pub indicate_msgs: u64,
    /// Times the writer waited for pool elements.
    pub element_stalls: u64,
    /// Times the writer waited for receive credits.
    pub credit_stalls: u64,
    /// BufferRecvPoolUpdate and Credit messages sent.
    pub credit_msgs: u64,
    /// Writes the peer made into our flushed pool before replying.
    pub writes_before_flush_reply: u64,
}

/// The messaging layer of one side.
#[derive(Debug)]
pub struct Session {
    plan: Plan,
    credits: MsgCredits,
    local: Vec<PoolLedger>,
    remote: Option<Vec<RemotePool>>,
    outbox: VecDeque<Msg>,
    next_ctx: u64,
    stalled: bool,
    hello_sent: bool,
    done_sent: bool,
    bye_sent: bool,
    peer_done: Option<(u64, u64)>,
    peer_bye: bool,
    /// Counters.
    pub stats: Stats,
}

impl Session {
    /// A session advertising `local` pools, with `depth` receives posted on each side.
    pub fn new(plan: Plan, local: Vec<PoolAdvert>, depth: u32) -> Self {
        Self {
            plan,
            credits: MsgCredits::new(depth),
            local: local.into_iter().map(PoolLedger::new).collect(),
            remote: None,
            outbox: VecDeque::new(),
            next_ctx: plan.seed << 32,
            stalled: false,
            hello_sent: false,
            done_sent: false,
            bye_sent: false,
            peer_done: None,
            peer_bye: false,
            stats: Stats::default(),
        }
    }

    /// True once the peer said Bye: the receiver stops.
    pub fn peer_bye(&self) -> bool {
        self.peer_bye
    }

    /// Everything from the peer arrived and every flush we asked for was answered.
    fn inbound_complete(&self) -> bool {
        let flushing = self
            .local
            .iter()
            .any(|p| matches!(p.state, PoolState::Flushing(_)));
        self.peer_done
            .is_some_and(|(n, _)| n == self.stats.received)
            && !flushing
    }

    fn send(&mut self, body: Body, ctx: u64) -> Option<Action> {
        let grant = self.credits.take()?;
        self.stalled = false;
        Some(Action::Send(Msg { ctx, grant, body }))
    }

    fn wait(&mut self, why: Stall) -> Action {
        if !self.stalled {
            self.stalled = true;
            match why {
                Stall::Elements => self.stats.element_stalls += 1,
                Stall::Credits => self.stats.credit_stalls += 1,
            }
        }
        Action::Wait
    }

    /// The writer's next step, in priority order: our pool advertisement, queued replies
    /// and updates, the planned flush, data, Done, a lone credit grant, Bye. An error
    /// means this side cannot go on (a message no open pool of the peer can hold).
    pub fn next_action(&mut self) -> Result<Action, String> {
        if self.bye_sent {
            return Ok(Action::Finished);
        }
        if !self.hello_sent {
            let adverts = self.local.iter().map(|p| p.advert).collect();
            let action = self.send(Body::RecvPool(adverts), 0);
            self.hello_sent = action.is_some();
            return Ok(action.unwrap_or_else(|| self.wait(Stall::Credits)));
        }
        if let Some(msg) = self.outbox.pop_front() {
            let update = matches!(msg.body, Body::PoolUpdate(_));
            if let Some(action) = self.send(msg.body.clone(), msg.ctx) {
                self.stats.credit_msgs += u64::from(update);
                return Ok(action);
            }
            self.outbox.push_front(msg);
            return Ok(self.wait(Stall::Credits));
        }
        let sent = self.stats.sent;
        if let Some(pool) = self
            .plan
            .flush_pool
            .filter(|_| sent >= self.plan.messages / 2)
        {
            let ctx = self.next_ctx;
            let Some(action) = self.send(Body::FlushRequest(vec![pool]), ctx) else {
                return Ok(self.wait(Stall::Credits));
            };
            self.next_ctx += 1;
            self.plan.flush_pool = None;
            if let Some(p) = self.local.get_mut(pool as usize) {
                p.state = PoolState::Flushing(ctx);
            }
            return Ok(action);
        }
        let mut stall = None;
        if sent < self.plan.messages {
            match self.push(sent)? {
                Data::Go(action) => return Ok(action),
                Data::Blocked(why) => stall = why,
            }
        } else if !self.done_sent {
            let (messages, bytes) = (sent, self.stats.bytes_sent);
            let action = self.send(Body::Done { messages, bytes }, 0);
            self.done_sent = action.is_some();
            return Ok(action.unwrap_or_else(|| self.wait(Stall::Credits)));
        }
        if self.credits.grant_due()
            && !self.peer_bye
            && let Some(action) = self.send(Body::Credit, 0)
        {
            self.stats.credit_msgs += 1;
            return Ok(action);
        }
        if self.done_sent
            && self.inbound_complete()
            && let Some(action) = self.send(Body::Bye, 0)
        {
            self.bye_sent = true;
            return Ok(action);
        }
        Ok(match stall {
            Some(why) => self.wait(why),
            None => Action::Wait,
        })
    }

    /// Message `seq` if a pool element and a receive credit are free.
    fn push(&mut self, seq: u64) -> Result<Data, String> {
        let len = message_len(self.plan.seed, seq);
        let Some(remote) = self.remote.as_mut() else {
            return Ok(Data::Blocked(None));
        };
        let npools = remote.len();
        // The smallest open pool whose elements hold the message (adverts are by size).
        let pool = remote
            .iter_mut()
            .filter(|p| !p.flushed && p.advert.size >= len)
            .min_by_key(|p| p.advert.size)
            .ok_or_else(|| format!("no open pool of the peer holds a {len}-octet message"))?;
        if pool.outstanding() >= pool.advert.count {
            return Ok(Data::Blocked(Some(Stall::Elements)));
        }
        let Some(grant) = self.credits.take() else {
            return Ok(Data::Blocked(Some(Stall::Credits)));
        };
        let element = pool
            .acquire()
            .ok_or("internal error: a free element vanished")?;
        let a = pool.advert;
        let dst = pool.target(element, len);
        let ind = Indication {
            pool: a.pool,
            element,
            len,
        };
        let indicator = match ind.pack().filter(|_| fits_idata(npools, a.count, a.size)) {
            Some(idata) => {
                self.stats.idata += 1;
                Indicator::Immediate(Immediate { idata, grant }.to_u64())
            }
            None => {
                self.stats.indicate_msgs += 1;
                let body = Body::Indicate(ind);
                Indicator::Message(Msg {
                    ctx: 0,
                    grant,
                    body,
                })
            }
        };
        self.stalled = false;
        self.stats.sent += 1;
        self.stats.bytes_sent += u64::from(len);
        Ok(Data::Go(Action::Push {
            seq,
            len,
            dst,
            indicator,
        }))
    }

    /// One of our receive buffers was reposted.
    pub fn reposted(&mut self) {
        self.credits.reposted();
    }

    /// Handles one receive completion. An error ends the connection: the peer broke the
    /// protocol.
    pub fn on_inbound(&mut self, inbound: Inbound) -> Result<Event, String> {
        let msg = match inbound {
            Inbound::Immediate(v) => {
                let imm = Immediate::from_u64(v)
                    .ok_or_else(|| format!("immediate data {v:#018x} has reserved bits set"))?;
                self.credits.granted(imm.grant)?;
                return self.indication(Indication::unpack(imm.idata));
            }
            Inbound::Message(Err(WireError::Version { ctx, .. })) => {
                // Unsupported version: its grant cannot be trusted, but the request gets
                // an answer echoing its context.
                let body = Body::Error {
                    code: ERR_VERSION,
                    supported: VERSION,
                };
                self.outbox.push_back(Msg {
                    ctx,
                    grant: 0,
                    body,
                });
                return Ok(Event::Nothing);
            }
            Inbound::Message(msg) => msg.map_err(|e| e.to_string())?,
        };
        self.credits.granted(msg.grant)?;
        if self.peer_bye {
            return Err(format!("the peer sent {:?} after its Bye", msg.body));
        }
        match msg.body {
            Body::RecvPool(adverts) if self.remote.is_none() => {
                let mut pools: Vec<_> = adverts.into_iter().map(RemotePool::new).collect();
                if pools.iter().any(|p| p.advert.count == 0) {
                    return Err("the peer advertised a pool of no elements".into());
                }
                pools.sort_by_key(|p| p.advert.size);
                self.remote = Some(pools);
            }
            Body::PoolUpdate(updates) => {
                for (pool, n) in updates {
                    match self.remote_pool(pool)? {
                        p if p.flushed => {} // returned before the flush; never used again
                        p => p.returned(n)?,
                    }
                }
            }
            Body::FlushRequest(pools) => {
                for pool in pools {
                    self.remote_pool(pool)?.flushed = true;
                }
                // Queued after every write already handed out: it goes out after them.
                let reply = Body::FlushReply;
                self.outbox.push_back(Msg {
                    ctx: msg.ctx,
                    grant: 0,
                    body: reply,
                });
            }
            Body::FlushReply => {
                let ctx = msg.ctx;
                let pool = self
                    .local
                    .iter_mut()
                    .find(|p| p.state == PoolState::Flushing(ctx))
                    .ok_or_else(|| format!("FlushReply for unknown transaction {ctx:#x}"))?;
                pool.state = PoolState::Flushed;
                return Ok(Event::Deregister(pool.advert.pool));
            }
            Body::Indicate(ind) => return self.indication(ind),
            Body::Credit => {}
            Body::Done { messages, bytes } => {
                if messages != self.stats.received || bytes != self.stats.bytes_received {
                    return Err(format!(
                        "the peer pushed {messages} messages ({bytes} octets) but \
                         {} ({} octets) arrived",
                        self.stats.received, self.stats.bytes_received
                    ));
                }
                self.peer_done = Some((messages, bytes));
            }
            Body::Bye if self.inbound_complete() => {
                self.peer_bye = true;
                self.outbox.clear(); // only updates and credits can be left; nobody needs them
            }
            Body::Error { code, supported } => {
                return Err(format!(
                    "the peer refused request {:#x} (code {code}): it speaks protocol \
                     version {supported}, we speak {VERSION}",
                    msg.ctx
                ));
            }
            other => return Err(format!("unexpected message from the peer: {other:?}")),
        }
        Ok(Event::Nothing)
    }

    fn remote_pool(&mut self, pool: u32) -> Result<&mut RemotePool, String> {
        self.remote
            .iter_mut()
            .flatten()
            .find(|p| p.advert.pool == pool)
            .ok_or_else(|| format!("the peer named pool {pool}, which it never advertised"))
    }

    fn indication(&mut self, ind: Indication) -> Result<Event, String> {
        let ledger = self.local.get_mut(ind.pool as usize).ok_or_else(|| {
            format!(
                "indication for pool {}, which we never advertised",
                ind.pool
            )
        })?;
        let offset = ledger.indicated(ind.element, ind.len)?;
        if matches!(ledger.state, PoolState::Flushing(_)) {
            self.stats.writes_before_flush_reply += 1;
        }
        let seq = self.stats.received;
        self.stats.received += 1;
        self.stats.bytes_received += u64::from(ind.len);
        Ok(Event::Data {
            pool: ind.pool,
            offset,
            len: ind.len,
            seq,
        })
    }

    /// The data of the last [`Event::Data`] in `pool` was checked and copied out: its
    /// element is free again (returned in batches).
    pub fn consumed(&mut self, pool: u32) {
        if let Some(ledger) = self.local.get_mut(pool as usize) {
            ledger.consumed();
            if let Some(n) = ledger.take_update() {
                self.outbox
                    .push_back(Msg::new(Body::PoolUpdate(vec![(pool, n)])));
            }
        }
    }
}
