//! What the daemon's clients hold, summed by the user they run as: every limit on what a
//! client can make iwarpd hold applies to its user (its control socket's peer credentials,
//! `SO_PEERCRED`), so that one user cannot take from everyone by opening more sessions or
//! running more processes; and the daemon's own totals bound them all.
//!
//! Nothing is counted twice or left behind: a user's usage is the sum of what its live
//! sessions' objects hold now ([`Objects::usage`](super::session::Objects::usage)), so a
//! session that ends gives everything back by ending.
//!
//! The registry ([`Users`]) is the daemon's one list of its sessions: what limits are
//! summed over, what an upgrade asks to move, and whose each queue pair is in a listing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::{Notify, mpsc};

use super::mover::{Ask, SessionMover};
use super::session::Session;
use super::usage::Usage;

/// Sessions that have not opened the device yet, at most: past this many the oldest is
/// dropped (an honest application opens at once, so the oldest waiting is the likeliest
/// to be silent).
pub(super) const MAX_UNOPENED: usize = 128;

/// The user a session runs as, for accounting: its peer's uid, or one bucket for peers
/// whose credentials could not be read.
pub(super) fn user_of(uid: Option<u32>) -> u32 {
    uid.unwrap_or(u32::MAX)
}

/// A session as the registry knows it.
struct Member {
    user: u32,
    opened: bool,
    session: Weak<Session>,
    /// What asks it to move to a successor daemon, while it can be asked.
    mover: Option<mpsc::Sender<Ask>>,
}

/// Every session of the daemon (all shards), by serial.
#[derive(Default)]
pub(super) struct Users {
    members: Mutex<Members>,
}

#[derive(Default)]
struct Members {
    next: u64,
    by_serial: HashMap<u64, Member>,
    /// Sessions not opened yet, oldest first, each with what tells it to go.
    unopened: VecDeque<(u64, Arc<Notify>)>,
}

impl Members {
    /// Lists `s`; its serial.
    fn insert(&mut self, s: &Arc<Session>, opened: bool) -> u64 {
        self.next += 1;
        let member = Member {
            user: user_of(s.uid),
            opened,
            session: Arc::downgrade(s),
            mover: None,
        };
        self.by_serial.insert(self.next, member);
        self.next
    }
}

impl std::fmt::Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Users").finish_non_exhaustive()
    }
}

impl Users {
    fn lock(&self) -> std::sync::MutexGuard<'_, Members> {
        self.members.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists a new session that has not opened the device; its serial, and what tells it
    /// to go because newer ones are waiting (past [`MAX_UNOPENED`], the oldest goes).
    pub(super) fn join(&self, s: &Arc<Session>) -> (u64, Arc<Notify>) {
        let mut m = self.lock();
        let serial = m.insert(s, false);
        let go = Arc::new(Notify::new());
        m.unopened.push_back((serial, go.clone()));
        while m.unopened.len() > MAX_UNOPENED {
            if let Some((_, oldest)) = m.unopened.pop_front() {
                oldest.notify_one();
            }
        }
        (serial, go)
    }

    /// Lists a session moved in from a daemon before: it opened the device there.
    pub(super) fn join_opened(&self, s: &Arc<Session>) -> u64 {
        self.lock().insert(s, true)
    }

    /// The session `serial` opens the device, if its user and the daemon are within
    /// `max_per_user` and `max` opened sessions; otherwise why not.
    pub(super) fn open(&self, serial: u64, max: usize, max_per_user: usize) -> Result<(), String> {
        let mut m = self.lock();
        let Some(user) = m.by_serial.get(&serial).map(|v| v.user) else {
            return Ok(());
        };
        let opened = m.by_serial.values().filter(|v| v.opened);
        let (all, mine) = opened.fold((0, 0), |(a, u), v| (a + 1, u + usize::from(v.user == user)));
        if all >= max {
            return Err(format!(
                "iwarpd serves {max} applications already, its limit: wait until one \
                 detaches, or raise max_local_clients in the daemon's configuration"
            ));
        }
        if mine >= max_per_user {
            return Err(format!(
                "this user ({}) has {max_per_user} applications attached to iwarpd already, \
                 the most one user may: detach some, or raise max_local_clients_per_user \
                 in the daemon's configuration",
                shown(user)
            ));
        }
        m.unopened.retain(|(s, _)| *s != serial);
        if let Some(v) = m.by_serial.get_mut(&serial) {
            v.opened = true;
        }
        Ok(())
    }

    /// The session `serial` ended.
    pub(super) fn leave(&self, serial: u64) {
        let mut m = self.lock();
        m.by_serial.remove(&serial);
        m.unopened.retain(|(s, _)| *s != serial);
    }

    /// What `user`'s sessions hold now, and what every session holds. Takes each
    /// session's lock in turn: never call it holding one.
    pub(super) fn usage(&self, user: u32) -> (Usage, Usage) {
        let sessions: Vec<(u32, Arc<Session>)> = self
            .lock()
            .by_serial
            .values()
            .filter_map(|v| Some((v.user, v.session.upgrade()?)))
            .collect();
        let (mut mine, mut all) = (Usage::default(), Usage::default());
        for (u, s) in sessions {
            let held = s.objs().usage();
            all.add(&held);
            if u == user {
                mine.add(&held);
            }
        }
        (mine, all)
    }

    /// The session `serial` can be asked to move (`Some`), or no longer can.
    pub(super) fn set_mover(&self, serial: u64, ask: Option<mpsc::Sender<Ask>>) {
        if let Some(v) = self.lock().by_serial.get_mut(&serial) {
            v.mover = ask;
        }
    }

    /// The sessions that can be asked to move now.
    pub(super) fn movers(&self) -> Vec<SessionMover> {
        self.lock()
            .by_serial
            .values()
            .filter_map(|v| Some(SessionMover(v.mover.clone()?)))
            .collect()
    }

    /// Every session now.
    pub(super) fn sessions(&self) -> Vec<Arc<Session>> {
        self.lock()
            .by_serial
            .values()
            .filter_map(|v| v.session.upgrade())
            .collect()
    }

    /// Sessions that opened the device now.
    pub(super) fn opened(&self) -> usize {
        self.lock().by_serial.values().filter(|v| v.opened).count()
    }
}

/// A user as messages name it.
pub(super) fn shown(user: u32) -> String {
    if user == u32::MAX {
        "uid unknown".to_owned()
    } else {
        format!("uid {user}")
    }
}
