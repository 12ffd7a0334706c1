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

    /// The total of several costs.
    pub fn sum<'a>(costs: impl IntoIterator<Item = &'a Cost>) -> Cost {
        costs.into_iter().fold(Cost::default(), |a, c| Cost {
            real_time_seconds: a.real_time_seconds + c.real_time_seconds,
            gpu_minutes: a.gpu_minutes + c.gpu_minutes,
            requests_sent: a.requests_sent + c.requests_sent,
        })
    }
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
}
