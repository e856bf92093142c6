//! The numbers behind perftest's result lines: latency statistics of the intervals
//! between post timestamps, kept in an HDR histogram, and the peak bandwidth from
//! per-completion timestamps.

use hdrhistogram::Histogram;

/// Significant figures the latency histogram keeps: intervals up to 32.7 us are exact
/// to the nanosecond, longer ones within 0.006% (perftest prints hundredths of a us).
const SIGNIFICANT_FIGURES: u8 = 4;

/// perftest's latency summary, in microseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct LatStats {
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// The median (perftest's `t_typical`).
    pub typical: f64,
    /// The mean.
    pub avg: f64,
    /// The standard deviation.
    pub stdev: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile.
    pub p999: f64,
}

/// The intervals between a latency run's consecutive post timestamps, as an HDR
/// histogram: its memory stays bounded however long a timed (`-D`) run lasts.
#[derive(Debug)]
pub struct Intervals {
    hist: Histogram<u64>,
    /// The last post timestamp (nanoseconds).
    last: Option<u64>,
    /// Timestamps seen.
    posts: u64,
}

impl Default for Intervals {
    fn default() -> Self {
        Self::new()
    }
}

impl Intervals {
    /// No posts yet.
    pub fn new() -> Self {
        let hist = Histogram::new(SIGNIFICANT_FIGURES)
            .unwrap_or_else(|_| unreachable!("4 significant figures are within 0..=5"));
        Self {
            hist,
            last: None,
            posts: 0,
        }
    }

    /// Records a post at `at` nanoseconds (timestamps never go back; one that does
    /// counts as a zero interval).
    pub fn post(&mut self, at: u64) {
        if let Some(last) = self.last {
            let interval = at.saturating_sub(last);
            // The histogram grows to fit; only a value beyond its largest possible
            // range is clamped.
            if self.hist.record(interval).is_err() {
                self.hist.saturating_record(interval);
            }
        }
        self.last = Some(at);
        self.posts += 1;
    }

    /// How many posts were recorded.
    pub fn posts(&self) -> u64 {
        self.posts
    }

    /// The statistics of the intervals, each divided by `rtt_factor` (perftest's 2 for
    /// the ping-pong tests, 1 for `read_lat`). `None` with fewer than two posts.
    pub fn stats(&self, rtt_factor: f64) -> Option<LatStats> {
        let h = &self.hist;
        if h.is_empty() {
            return None;
        }
        let us = |ns: f64| ns / 1e3 / rtt_factor;
        let at = |q: f64| us(h.value_at_quantile(q) as f64);
        Some(LatStats {
            min: us(h.min() as f64),
            max: us(h.max() as f64),
            typical: at(0.5),
            avg: us(h.mean()),
            stdev: us(h.stdev()),
            p99: at(0.99),
            p999: at(0.999),
        })
    }
}

/// Above this many operations the peak search looks at every `len / PEAK_GRID`-th
/// window edge instead of all of them (the search is quadratic).
const PEAK_GRID: usize = 4096;

/// perftest's peak: the smallest average time per operation over any run of
/// consecutive operations `i..=j`, `(completed[j] - posted[i]) / (j - i + 1)`, in
/// nanoseconds (timestamps in nanoseconds; completion `j` is the `j`-th to complete).
/// Beyond 4096 operations only a grid of 4096 window edges is searched. `None` if
/// there is nothing to measure.
pub fn peak_op_time(posted: &[u64], completed: &[u64]) -> Option<f64> {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return None;
    }
    let step = n.div_ceil(PEAK_GRID).max(1);
    let mut edges: Vec<usize> = (0..n).step_by(step).collect();
    if edges.last() != Some(&(n - 1)) {
        edges.push(n - 1);
    }
    let mut best = f64::INFINITY;
    for (a, &i) in edges.iter().enumerate() {
        let Some(&start) = posted.get(i) else {
            continue;
        };
        for &j in edges.get(a..).unwrap_or_default() {
            let Some(&end) = completed.get(j) else {
                continue;
            };
            let t = end.saturating_sub(start) as f64 / (j - i + 1) as f64;
            if t < best {
                best = t;
            }
        }
    }
    best.is_finite().then_some(best.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intervals(posted: impl IntoIterator<Item = u64>) -> Intervals {
        let mut i = Intervals::new();
        posted.into_iter().for_each(|t| i.post(t));
        i
    }

    #[test]
    fn latency_of_known_intervals() {
        // Intervals 10, 20, 30, 40 us; halved for a ping-pong.
        let posted = [0, 10_000, 30_000, 60_000, 100_000];
        let i = intervals(posted);
        assert_eq!(i.posts(), 5);
        let s = i.stats(2.0).unwrap();
        let near = |a: f64, b: f64| (a - b).abs() < 1e-3 * b;
        assert!(near(s.min, 5.0) && near(s.max, 20.0), "{s:?}");
        assert!(near(s.typical, 10.0), "{s:?}");
        assert!(near(s.avg, 12.5), "{s:?}");
        assert!(near(s.stdev, 5.590_169_943_749_474), "{s:?}");
        assert!(near(s.p99, 20.0) && near(s.p999, 20.0), "{s:?}");
        let odd = intervals(posted[..4].iter().copied()).stats(1.0).unwrap();
        assert_eq!(odd.typical, 20.0);
        assert_eq!(intervals([5]).stats(1.0), None);
        assert_eq!(Intervals::new().stats(1.0), None);
    }

    #[test]
    fn percentiles_by_rank_exact_to_the_nanosecond_below_32_us() {
        // Intervals 2i+1 ns for i in 0..10_000 (1 ns to 19.999 us), each exact.
        let s = intervals((0..=10_000u64).map(|i| i * i))
            .stats(1.0)
            .unwrap();
        assert_eq!(s.min, 0.001);
        assert_eq!(s.typical, (2.0 * 4_999.0 + 1.0) / 1e3);
        assert_eq!(s.p99, (2.0 * 9_899.0 + 1.0) / 1e3);
        assert_eq!(s.p999, (2.0 * 9_989.0 + 1.0) / 1e3);
        assert_eq!(s.max, 19.999);
    }

    #[test]
    fn long_intervals_within_the_histograms_precision() {
        // 1 ms to 10 s: each number within 0.01%.
        let posted = [0, 1_000_000, 11_000_000, 10_011_000_000];
        let s = intervals(posted).stats(1.0).unwrap();
        let near = |a: f64, b: f64| (a - b).abs() <= 1e-4 * b;
        assert!(near(s.min, 1_000.0) && near(s.max, 10_000_000.0), "{s:?}");
        assert!(near(s.typical, 10_000.0), "{s:?}");
        assert!(near(s.avg, 10_011_000.0 / 3.0), "{s:?}");
    }

    #[test]
    fn a_clock_going_back_is_a_zero_interval() {
        let s = intervals([1_000, 500, 2_500]).stats(1.0).unwrap();
        assert_eq!((s.min, s.max), (0.0, 2.0));
    }

    #[test]
    fn peak_finds_the_fastest_run() {
        // Four ops posted at once; completions at 40, 50, 60, 400: the run 0..=2 averages
        // 20 ns per op, better than any other.
        let posted = [0, 0, 0, 0];
        let completed = [40, 50, 60, 400];
        assert_eq!(peak_op_time(&posted, &completed), Some(20.0));
        assert_eq!(peak_op_time(&[], &[]), None);
    }

    #[test]
    fn peak_on_a_grid_for_long_runs() {
        let n = 10_000u64;
        let posted: Vec<u64> = (0..n).map(|i| i * 10).collect();
        let completed: Vec<u64> = (0..n).map(|i| i * 10 + 100).collect();
        let t = peak_op_time(&posted, &completed).unwrap();
        // The whole run: (99_990 + 100) / 10_000 ~ 10.009 ns per op.
        assert!((t - 10.009).abs() < 0.01, "{t}");
    }
}
