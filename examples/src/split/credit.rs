//! Buffer accounting: the two kinds of credit the push-push protocol runs on.
//!
//! * **Element credits** ([`RemotePool`] on the sender, [`PoolLedger`] on the owner): an
//!   advertised pool of *n* elements is *n* RDMA Write credits. The sender writes element
//!   after element in ring order, never more than *n* outstanding; the owner returns
//!   elements with BufferRecvPoolUpdate once it copied their data out.
//! * **Receive credits** ([`MsgCredits`]): every Send and Immediate Data consumes one of
//!   the peer's posted receive buffers. iWARP has no receiver-not-ready retry: an
//!   untagged message arriving with no receive posted is a fatal DDP error (the peer
//!   Terminates the stream, RFC 5041 section 7.2, RFC 5040 section 7), so a sender may
//!   only send while it holds a credit. Credits come back in the `grant` of every message.

use verbs::RemoteBuf;

use super::wire::PoolAdvert;

/// Receive credits of one side: how many of the peer's receive buffers it may still
/// consume, and how many of its own it reposted without telling the peer yet.
#[derive(Clone, Debug)]
pub struct MsgCredits {
    avail: u32,
    owed: u32,
    depth: u32,
}

impl MsgCredits {
    /// Both sides post `depth` receives before connecting: that many credits each way.
    /// At least 3 are needed (see [`grant_due`](Self::grant_due)); less counts as 3.
    pub fn new(depth: u32) -> Self {
        let depth = depth.max(3);
        Self {
            avail: depth,
            owed: 0,
            depth,
        }
    }

    /// Takes a credit for one message and returns the grant it must carry, or `None`.
    ///
    /// The last credit may only be spent on a message that returns credits: if both sides
    /// spent their last one on messages granting nothing, neither could ever send again.
    pub fn take(&mut self) -> Option<u16> {
        if self.avail >= 2 || (self.avail == 1 && self.owed > 0) {
            self.avail -= 1;
            let grant = u16::try_from(self.owed).unwrap_or(u16::MAX);
            self.owed -= u32::from(grant);
            Some(grant)
        } else {
            None
        }
    }

    /// The peer returned `n` credits; more than it could owe is a protocol error.
    pub fn granted(&mut self, n: u16) -> Result<(), String> {
        self.avail += u32::from(n);
        if self.avail > self.depth {
            return Err(format!(
                "the peer returned receive credits for {} buffers, only {} exist",
                self.avail, self.depth
            ));
        }
        Ok(())
    }

    /// One of our receive buffers was reposted: a credit to return.
    pub fn reposted(&mut self) {
        self.owed += 1;
    }

    /// True when so many credits are owed that they deserve a message of their own:
    /// half the depth, but at least 2.
    ///
    /// At least 2, or two sides would answer each lone grant with another forever; at
    /// most `depth - 1`, because a peer stuck on its last credit with nothing to grant
    /// has `depth - 1` messages here waiting to be returned.
    pub fn grant_due(&self) -> bool {
        self.owed >= (self.depth / 2).max(2)
    }

    /// Credits this side may still spend.
    pub fn available(&self) -> u32 {
        self.avail
    }
}

/// The sender's view of one pool the peer advertised.
#[derive(Clone, Debug)]
pub struct RemotePool {
    /// The advertisement.
    pub advert: PoolAdvert,
    /// True once the owner flushed it: no write may go there again.
    pub flushed: bool,
    next: u32,
    outstanding: u32,
}

impl RemotePool {
    /// A pool as advertised, all elements free.
    pub fn new(advert: PoolAdvert) -> Self {
        Self {
            advert,
            flushed: false,
            next: 0,
            outstanding: 0,
        }
    }

    /// The next free element, taken (consumed); `None` when all are outstanding or the
    /// pool was flushed. Invariant: `outstanding <= advert.count`.
    pub fn acquire(&mut self) -> Option<u32> {
        if self.flushed || self.outstanding >= self.advert.count {
            return None;
        }
        let element = self.next;
        self.next = (self.next + 1) % self.advert.count;
        self.outstanding += 1;
        Some(element)
    }

    /// The owner returned `n` elements.
    pub fn returned(&mut self, n: u32) -> Result<(), String> {
        self.outstanding = self.outstanding.checked_sub(n).ok_or_else(|| {
            format!(
                "the peer returned {n} elements of pool {} but only {} were outstanding",
                self.advert.pool, self.outstanding
            )
        })?;
        Ok(())
    }

    /// Elements written and not yet returned.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Where element `element` is, `len` octets of it.
    pub fn target(&self, element: u32, len: u32) -> RemoteBuf {
        let a = &self.advert;
        RemoteBuf {
            stag: a.stag.into(),
            to: a.to.wrapping_add(u64::from(element) * u64::from(a.size)),
            len: len.min(a.size),
        }
    }
}

/// Where an owned pool is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PoolState {
    /// Advertised and in use.
    Open,
    /// FlushRequest sent with this context; the peer may still be writing.
    Flushing(u64),
    /// The peer replied: it writes here no more, so the memory may be deregistered.
    Flushed,
}

/// The owner's view of one of its pools.
#[derive(Clone, Debug)]
pub struct PoolLedger {
    /// The advertisement sent for it.
    pub advert: PoolAdvert,
    /// Its life stage.
    pub state: PoolState,
    expect: u32,
    held: u32,
    to_return: u32,
}

impl PoolLedger {
    /// A freshly advertised pool.
    pub fn new(advert: PoolAdvert) -> Self {
        Self {
            advert,
            state: PoolState::Open,
            expect: 0,
            held: 0,
            to_return: 0,
        }
    }

    /// Checks an indication of `len` octets in `element` and returns the element's
    /// offset in the pool. The peer must use elements in ring order, never one it holds
    /// already, never past the element size, and never after it acknowledged a flush.
    pub fn indicated(&mut self, element: u32, len: u32) -> Result<usize, String> {
        let a = self.advert;
        if self.state == PoolState::Flushed {
            return Err(format!(
                "the peer wrote into pool {} after acknowledging its flush",
                a.pool
            ));
        }
        if element != self.expect || self.held >= a.count || len > a.size {
            return Err(format!(
                "bad indication for pool {}: element {element} ({len} octets); expected \
                 element {} of {} octets at most with {} of {} elements held",
                a.pool, self.expect, a.size, self.held, a.count
            ));
        }
        self.expect = (self.expect + 1) % a.count;
        self.held += 1;
        Ok(element as usize * a.size as usize)
    }

    /// The data of the oldest indicated element was copied out: it may be returned.
    pub fn consumed(&mut self) {
        self.to_return += 1;
    }

    /// Elements to return in a BufferRecvPoolUpdate, once half the pool is waiting (a
    /// sender out of elements has all of them outstanding, so it always gets some back).
    pub fn take_update(&mut self) -> Option<u32> {
        let due = self.to_return > 0 && self.to_return >= self.advert.count.div_ceil(2);
        (due && self.state == PoolState::Open).then(|| {
            let n = std::mem::take(&mut self.to_return);
            self.held -= n;
            n
        })
    }
}
