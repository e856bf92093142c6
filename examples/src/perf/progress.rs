//! The progress line on stderr: percent done and elapsed time, rewritten in place
//! with `\r`, shown only when stderr is a terminal and the run has lasted more than
//! two seconds.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

/// When the line first appears.
const SHOW_AFTER: Duration = Duration::from_secs(2);
/// How often it is redrawn.
const REDRAW: Duration = Duration::from_millis(200);

/// What a run counts to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Goal {
    /// A number of iterations.
    Iters(u64),
    /// A duration (`-D`).
    Time(Duration),
}

/// One run's progress line.
#[derive(Debug)]
pub struct Progress {
    label: String,
    goal: Goal,
    started: Instant,
    next_draw: Instant,
    enabled: bool,
    drawn: bool,
}

impl Progress {
    /// Starts timing a run called `label` (drawn only if stderr is a terminal).
    pub fn new(label: impl Into<String>, goal: Goal) -> Self {
        Self::with_output(label, goal, std::io::stderr().is_terminal())
    }

    /// [`Self::new`] with the terminal check made by the caller.
    pub fn with_output(label: impl Into<String>, goal: Goal, enabled: bool) -> Self {
        let now = Instant::now();
        Self {
            label: label.into(),
            goal,
            started: now,
            next_draw: now + SHOW_AFTER,
            enabled,
            drawn: false,
        }
    }

    /// The text of the line after `done` iterations and `elapsed` time.
    pub fn line(&self, done: u64, elapsed: Duration) -> String {
        let pct = match self.goal {
            Goal::Iters(n) => done as f64 * 100.0 / n.max(1) as f64,
            Goal::Time(d) => elapsed.as_secs_f64() * 100.0 / d.as_secs_f64().max(1e-9),
        };
        format!(
            "{}: {:5.1}% done, {} iterations, {:.1} s elapsed",
            self.label,
            pct.min(100.0),
            done,
            elapsed.as_secs_f64()
        )
    }

    /// Records `done` iterations; redraws at most every 200 ms once two seconds
    /// have passed.
    pub fn tick(&mut self, done: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now < self.next_draw {
            return;
        }
        self.next_draw = now + REDRAW;
        let line = self.line(done, now - self.started);
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r{line}\x1b[K");
        let _ = err.flush();
        self.drawn = true;
    }

    /// Clears the line if it was drawn.
    pub fn finish(&mut self) {
        if self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
            self.drawn = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_of_iterations_and_of_time() {
        let p = Progress::with_output("write_bw 65536", Goal::Iters(200), false);
        assert_eq!(
            p.line(50, Duration::from_millis(2500)),
            "write_bw 65536:  25.0% done, 50 iterations, 2.5 s elapsed"
        );
        let t = Progress::with_output("send_lat 2", Goal::Time(Duration::from_secs(10)), false);
        assert!(t.line(7, Duration::from_secs(5)).contains(" 50.0% done"));
        assert!(t.line(7, Duration::from_secs(50)).contains("100.0% done"));
    }

    #[test]
    fn silent_when_not_a_terminal() {
        let mut p = Progress::with_output("x", Goal::Iters(1), false);
        p.tick(1);
        assert!(!p.drawn);
    }
}
