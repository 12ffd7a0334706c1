//! What a test point costs: the deployment's accelerators held for the point's duration,
//! in GPU-minutes of real time.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The accelerator cost of a point, or of a benchmark (the sum of its points).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    /// Seconds the deployment was under load, in real-time equivalent: from the schedule's
    /// time zero to the last response (warmup and drain included). On a simulated engine
    /// run K times faster, wall clock × K.
    pub real_time_seconds: f64,
    /// Accelerator time: real-time seconds × replicas × GPUs per replica, in minutes.
    pub gpu_minutes: f64,
    /// Requests sent (warmup included).
    pub requests_sent: u64,
}

impl Cost {
    /// The cost of holding `gpus` accelerators (replicas × GPUs per replica) for
    /// `real_time_seconds` while sending `requests_sent` requests.
    pub fn of(real_time_seconds: f64, gpus: u32, requests_sent: u64) -> Cost {
        Cost {
            real_time_seconds,
            gpu_minutes: real_time_seconds * f64::from(gpus) / 60.0,
            requests_sent,
        }
    }

    /// What an open-loop point at `rate` holds at the least: its planned schedule,
    /// `requests` per block and blocks added until `min_duration_s` is covered, on `gpus`
    /// accelerators; the drain after the last send is not counted.
    pub fn planned(rate: f64, requests: u64, min_duration_s: f64, gpus: u32) -> Cost {
        if rate.is_nan() || rate <= 0.0 || requests == 0 {
            return Cost::default();
        }
        let block_s = requests as f64 / rate;
        let blocks = (min_duration_s / block_s).ceil().max(1.0);
        Cost::of(blocks * block_s, gpus, blocks as u64 * requests)
    }

    /// The total of several costs.
    pub fn sum<'a>(costs: impl IntoIterator<Item = &'a Cost>) -> Cost {
        costs.into_iter().fold(Cost::default(), |a, c| Cost {
            real_time_seconds: a.real_time_seconds + c.real_time_seconds,
            gpu_minutes: a.gpu_minutes + c.gpu_minutes,
            requests_sent: a.requests_sent + c.requests_sent,
        })
    }
}

/// What model placement saved, over the modes it placed, each given as the GPU-minutes of
/// the grid it replaced and those its rate points held: the sum of the differences
/// (negative when placement spent more); `None` when it placed no mode.
pub fn placement_saved_gpu_minutes(modes: impl IntoIterator<Item = (f64, f64)>) -> Option<f64> {
    modes
        .into_iter()
        .map(|(grid, held)| grid - held)
        .reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_minutes_are_real_time_by_the_gpus_held() {
        // 300 s of two replicas with 4 GPUs each: 40 GPU-minutes.
        let c = Cost::of(300.0, 8, 4600);
        assert_eq!(c.gpu_minutes, 40.0);
        let total = Cost::sum(&[c, Cost::of(60.0, 8, 100)]);
        assert_eq!(total.real_time_seconds, 360.0);
        assert_eq!(total.gpu_minutes, 48.0);
        assert_eq!(total.requests_sent, 4700);
    }

    #[test]
    fn a_planned_point_covers_its_minimum_duration_in_whole_blocks() {
        // 4,600 requests at 20 RPS: one 230 s block covers 120 s.
        assert_eq!(Cost::planned(20.0, 4600, 120.0, 2).real_time_seconds, 230.0);
        // 1,000 at 20 RPS: 50 s blocks, three of them for 120 s.
        let c = Cost::planned(20.0, 1000, 120.0, 2);
        assert_eq!((c.real_time_seconds, c.requests_sent), (150.0, 3000));
        assert_eq!(c.gpu_minutes, 5.0);
        assert_eq!(Cost::planned(0.0, 1000, 120.0, 2), Cost::default());
    }

    #[test]
    fn placement_saves_the_grid_less_what_it_held_summed_over_the_modes_it_placed() {
        assert_eq!(placement_saved_gpu_minutes([]), None);
        // 56 − 39.5 saved in one mode, 2 spent more in the other.
        assert_eq!(
            placement_saved_gpu_minutes([(56.0, 39.5), (20.0, 22.0)]),
            Some(14.5)
        );
    }
}
