//! Finding the highest request rate whose latency stays within a bound.
//!
//! Why a bracket and a bisection, not just a list of rates: a rate list
//! coarse enough to run in minutes (10k, 20k, 40k, ...) answers "somewhere
//! between 40k and 60k"; a ratio of two such answers is mostly the list's
//! spacing. The listed steps find a bracket [highest rate within the bound,
//! lowest listed rate above it that was not], then a few open-loop steps
//! bisect it. The listed steps go on past the bound (until the server falls
//! behind), so one noisy low step on a shared machine does not end the
//! search: the bracket is built from every step, whatever their order.
//!
//! Pure functions of the step outcomes, so they are tested without a server.

/// One step's outcome: its target rate and whether it stayed within the bound
/// (kept up with its schedule and met the latency bound).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    pub rate: f64,
    pub within: bool,
}

/// The highest rate that stayed within the bound, and the lowest rate above
/// it that did not. Either may be missing: nothing within (the server missed
/// the bound at every rate tried) or nothing over (a lower bound only).
pub fn bracket(outcomes: &[Outcome]) -> (Option<f64>, Option<f64>) {
    let lo = outcomes.iter().filter(|o| o.within).map(|o| o.rate).fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.max(r))));
    let hi = outcomes
        .iter()
        .filter(|o| !o.within && lo.map_or(true, |l| o.rate > l))
        .map(|o| o.rate)
        .fold(None, |m: Option<f64>, r| Some(m.map_or(r, |m| m.min(r))));
    (lo, hi)
}

/// The next rate to try inside (lo, hi), rounded to a readable step (1000/s
/// for wide brackets, 100/s for narrow ones), or None when the bracket is
/// already as narrow as that rounding: further steps would measure noise.
pub fn next_rate(lo: f64, hi: f64) -> Option<f64> {
    if !(hi > lo && lo > 0.0) {
        return None;
    }
    let grain = if hi - lo > 4000.0 { 1000.0 } else { 100.0 };
    let mid = ((lo + hi) / 2.0 / grain).round() * grain;
    if mid <= lo || mid >= hi {
        None
    } else {
        Some(mid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(rate: f64, within: bool) -> Outcome {
        Outcome { rate, within }
    }

    #[test]
    fn bracket_is_highest_within_and_lowest_over_above_it() {
        let steps = [o(10e3, true), o(20e3, true), o(40e3, true), o(60e3, false), o(80e3, false)];
        assert_eq!(bracket(&steps), (Some(40e3), Some(60e3)));
    }

    #[test]
    fn a_noisy_low_step_does_not_end_the_search() {
        // 20k missed the bound (another process ran), 40k met it: the
        // bracket is above 40k, not between 10k and 20k.
        let steps = [o(10e3, true), o(20e3, false), o(40e3, true), o(60e3, false)];
        assert_eq!(bracket(&steps), (Some(40e3), Some(60e3)));
    }

    #[test]
    fn bracket_may_be_open_on_either_side() {
        assert_eq!(bracket(&[o(10e3, false), o(20e3, false)]), (None, Some(10e3)));
        assert_eq!(bracket(&[o(10e3, true), o(20e3, true)]), (Some(20e3), None));
        assert_eq!(bracket(&[]), (None, None));
    }

    #[test]
    fn refined_steps_narrow_the_bracket() {
        // Bisection steps join the outcomes; the bracket shrinks around them.
        let mut steps = vec![o(40e3, true), o(60e3, false)];
        let r = next_rate(40e3, 60e3).unwrap();
        assert_eq!(r, 50e3);
        steps.push(o(r, false));
        assert_eq!(bracket(&steps), (Some(40e3), Some(50e3)));
        let r = next_rate(40e3, 50e3).unwrap();
        assert_eq!(r, 45e3);
        steps.push(o(r, true));
        assert_eq!(bracket(&steps), (Some(45e3), Some(50e3)));
    }

    #[test]
    fn next_rate_stays_strictly_inside_and_stops_when_narrow() {
        assert_eq!(next_rate(45e3, 50e3), Some(48e3)); // 47.5k rounded to 1000
        assert_eq!(next_rate(48e3, 50e3), Some(49e3)); // 100/s grain below 4k
        assert_eq!(next_rate(49e3, 49.2e3), Some(49.1e3));
        assert_eq!(next_rate(49.1e3, 49.2e3), None);
        assert_eq!(next_rate(50e3, 40e3), None);
        assert_eq!(next_rate(0.0, 40e3), None);
        for (lo, hi) in [(1e3, 2e3), (10e3, 20e3), (123e3, 457e3), (99.9e3, 100.3e3)] {
            if let Some(r) = next_rate(lo, hi) {
                assert!(r > lo && r < hi, "{r} outside ({lo}, {hi})");
            }
        }
    }
}
