//! Whether a client may have what it asks for: every limit on what one user's clients
//! hold together, and on what the daemon holds for all of them, checked in one place and
//! refused by name (which limit, how much is held, what to do).

use ipc::control::{Reply, error};

use super::replies::err;
use super::session::Session;
use super::usage::Usage;
use super::users::{shown, user_of};

/// The refusal if giving the client of `s` `need` more would take its user, or the
/// daemon, past a limit. Takes every session's lock in turn: call it holding none.
pub(super) fn check(s: &Session, need: Usage) -> Option<Reply> {
    let user = user_of(s.uid);
    let (mine, all) = s.device.users.usage(user);
    let l = &s.device.limits;
    let who = shown(user);
    let over = |held: usize, need: usize, max: usize| need > 0 && held.saturating_add(need) > max;
    if need.files > 0
        && let Some(r) = s.device.files.check(mine.files, need.files, &who)
    {
        return Some(r);
    }
    let refuse = |what: String| Some(err(error::LIMIT, what));
    if over(mine.qps, need.qps, l.max_qps) {
        return refuse(format!(
            "this user ({who}) holds {} queue pairs through iwarpd, the most one user may \
             (max_local_qps in the daemon's configuration): destroy some first",
            mine.qps
        ));
    }
    if over(mine.entries, need.entries, l.max_mrs) {
        return refuse(format!(
            "this user ({who}) holds {} regions, windows and reserved STags through iwarpd, \
             the most one user may (max_local_mrs in the daemon's configuration): register \
             fewer, larger regions, or free some first",
            mine.entries
        ));
    }
    if over(all.entries, need.entries, l.max_device_mrs) {
        return refuse(format!(
            "iwarpd's applications hold {} regions, windows and reserved STags, the most \
             it gives them all (max_local_mrs_total in its configuration): try again once some \
             are freed",
            all.entries
        ));
    }
    let share = l.max_registered / 2;
    if need.octets > 0 && mine.octets.saturating_add(need.octets) > share {
        return refuse(format!(
            "{} more octets of shared memory would take this user ({who}) past its share of \
             the memory iwarpd maps for applications (registered regions and queue rings): \
             it holds {} of {share} (half of max_registered, {} octets). Register less, free \
             what is not in use, or raise max_registered in the daemon's configuration",
            need.octets, mine.octets, l.max_registered
        ));
    }
    if need.octets > 0 && all.octets.saturating_add(need.octets) > l.max_registered {
        return refuse(format!(
            "{} more octets of shared memory would take iwarpd past the memory it maps for \
             applications (registered regions and queue rings): they hold {} of {} \
             (max_registered in its configuration). Try again once some are freed, or raise \
             the limit",
            need.octets, all.octets, l.max_registered
        ));
    }
    if over(mine.srqs, need.srqs, l.max_srqs) {
        return refuse(format!(
            "this user ({who}) holds {} shared receive queues through iwarpd, the most one \
             user may: destroy some first",
            mine.srqs
        ));
    }
    if over(mine.listeners, need.listeners, l.max_listeners) {
        return refuse(format!(
            "this user ({who}) holds {} listeners through iwarpd, the most one user may: \
             close some first",
            mine.listeners
        ));
    }
    None
}
