//! The progress line on stderr: percent done, elapsed time and the live rate (bandwidth
//! or time per iteration over the last redraw interval), rewritten in place with `\r`,
//! shown only when stderr is a terminal and the run has lasted more than two seconds.

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
    /// Octets an iteration moves (bandwidth tests); `None`: show time per iteration.
    size: Option<u64>,
    /// Iterations and time at the last redraw, for the live rate.
    last: (u64, Instant),
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
            size: None,
            last: (0, now),
        }
    }

    /// Shows the live bandwidth of iterations of `size` octets.
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }

    /// The text of the line after `done` iterations and `elapsed` time, with `recent`
    /// iterations in the last `window`.
    pub fn line(&self, done: u64, elapsed: Duration, (recent, window): (u64, Duration)) -> String {
        let pct = match self.goal {
            Goal::Iters(n) => done as f64 * 100.0 / n.max(1) as f64,
            Goal::Time(d) => elapsed.as_secs_f64() * 100.0 / d.as_secs_f64().max(1e-9),
        };
        let secs = window.as_secs_f64().max(1e-9);
        let rate = match self.size {
            Some(size) => format!("{:.2} Gbit/s", (recent * size) as f64 * 8.0 / secs / 1e9),
            None if recent > 0 => format!("{:.2} us an iteration", secs * 1e6 / recent as f64),
            None => "no iteration".to_owned(),
        };
        format!(
            "{}: {:5.1}% done, {} iterations, {:.1} s elapsed, now {rate}",
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
        let (was, at) = self.last;
        let line = self.line(
            done,
            now - self.started,
            (done.saturating_sub(was), now - at),
        );
        self.last = (done, now);
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
        let p = p.with_size(65536);
        let ms = Duration::from_millis;
        assert_eq!(
            p.line(50, ms(2500), (10, ms(200))),
            "write_bw 65536:  25.0% done, 50 iterations, 2.5 s elapsed, now 0.03 Gbit/s"
        );
        let t = Progress::with_output("send_lat 2", Goal::Time(Duration::from_secs(10)), false);
        let line = t.line(7, Duration::from_secs(5), (4, ms(200)));
        assert!(line.contains(" 50.0% done"), "{line}");
        assert!(line.ends_with("now 50000.00 us an iteration"), "{line}");
        assert!(
            t.line(7, Duration::from_secs(50), (0, ms(200)))
                .contains("100.0% done")
        );
    }

    #[test]
    fn silent_when_not_a_terminal() {
        let mut p = Progress::with_output("x", Goal::Iters(1), false);
        p.tick(1);
        assert!(!p.drawn);
    }
}
