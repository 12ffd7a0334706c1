//! The client's own CPU throttling over a point, from its cgroup's `cpu.stat`: a load
//! generator pod whose CPU limit throttles it falls behind its schedule, and a point thrown
//! out for that should say so. cgroup v2 counts `nr_periods`, `nr_throttled` and
//! `throttled_usec`; v1 (the `cpu` controller) `throttled_time` in nanoseconds.

use serde::{Deserialize, Serialize};

/// CPU bandwidth periods of the client's cgroup, and how many of them throttled it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuThrottling {
    /// Enforcement periods that elapsed (0 without a CPU limit).
    pub periods: u64,
    /// Periods in which the cgroup used up its quota and was stopped.
    pub throttled_periods: u64,
    /// Time the cgroup spent stopped (ms).
    pub throttled_ms: f64,
}

impl CpuThrottling {
    /// The counters of this process's cgroup now, or `None` where no `cpu.stat` with
    /// throttling counters can be read (no cgroup filesystem, another OS).
    pub fn read() -> Option<CpuThrottling> {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        stat_paths(&cgroups)
            .into_iter()
            .find_map(|p| parse(&std::fs::read_to_string(p).ok()?))
    }

    /// What happened between `earlier` and these counters (a counter that went back,
    /// as after a move to another cgroup, gives 0).
    pub fn since(&self, earlier: &CpuThrottling) -> CpuThrottling {
        CpuThrottling {
            periods: self.periods.saturating_sub(earlier.periods),
            throttled_periods: self
                .throttled_periods
                .saturating_sub(earlier.throttled_periods),
            throttled_ms: (self.throttled_ms - earlier.throttled_ms).max(0.0),
        }
    }

    /// The sum of two clients' throttling (the shards of one point).
    pub fn add(&self, other: &CpuThrottling) -> CpuThrottling {
        CpuThrottling {
            periods: self.periods + other.periods,
            throttled_periods: self.throttled_periods + other.throttled_periods,
            throttled_ms: self.throttled_ms + other.throttled_ms,
        }
    }

    /// The evidence in words, when it was throttled at all: `its cgroup's CPU limit stopped
    /// it in 12 of 40 periods (830 ms)`.
    pub fn evidence(&self) -> Option<String> {
        (self.throttled_periods > 0).then(|| {
            format!(
                "its cgroup's CPU limit stopped it in {} of {} periods ({:.0} ms)",
                self.throttled_periods, self.periods, self.throttled_ms
            )
        })
    }
}

/// Where this process's `cpu.stat` may be, most specific first: the cgroup v2 path, the v1
/// `cpu` controller's path (under each name the controller is mounted as), then the roots
/// (a container with its own cgroup namespace sees its cgroup there).
fn stat_paths(proc_self_cgroup: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/');
        if controllers.is_empty() {
            paths.push(format!("/sys/fs/cgroup{path}/cpu.stat"));
        } else if controllers.split(',').any(|c| c == "cpu") {
            for mount in ["cpu", "cpu,cpuacct", "cpuacct,cpu"] {
                paths.push(format!("/sys/fs/cgroup/{mount}{path}/cpu.stat"));
            }
        }
    }
    paths.push("/sys/fs/cgroup/cpu.stat".into());
    paths.push("/sys/fs/cgroup/cpu/cpu.stat".into());
    paths
}

/// A `cpu.stat` file's throttling counters; `None` without them (a v2 file of a cgroup
/// without the cpu controller has only usage).
fn parse(text: &str) -> Option<CpuThrottling> {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (key, value) = l.split_once(' ')?;
            (key == name).then(|| value.trim().parse::<u64>().ok())?
        })
    };
    let throttled_ms = match (field("throttled_usec"), field("throttled_time")) {
        (Some(us), _) => us as f64 / 1e3,
        (None, Some(ns)) => ns as f64 / 1e6,
        (None, None) => return None,
    };
    Some(CpuThrottling {
        periods: field("nr_periods")?,
        throttled_periods: field("nr_throttled")?,
        throttled_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_cgroup_versions_parse_and_a_file_without_counters_does_not() {
        let v2 = "usage_usec 5000\nuser_usec 4000\nsystem_usec 1000\nnr_periods 40\n\
                  nr_throttled 12\nthrottled_usec 830000\nnr_bursts 0\nburst_usec 0\n";
        assert_eq!(
            parse(v2),
            Some(CpuThrottling {
                periods: 40,
                throttled_periods: 12,
                throttled_ms: 830.0
            })
        );
        let v1 = "nr_periods 7\nnr_throttled 2\nthrottled_time 45000000\n";
        assert_eq!(parse(v1).map(|t| t.throttled_ms), Some(45.0));
        assert_eq!(parse("usage_usec 5000\nuser_usec 4000\n"), None);
    }

    #[test]
    fn the_cgroup_file_names_where_to_look_in_either_version() {
        let v2 = stat_paths("0::/kubepods/pod1/c1\n");
        assert_eq!(v2[0], "/sys/fs/cgroup/kubepods/pod1/c1/cpu.stat");
        let v1 = stat_paths("4:memory:/x\n2:cpu,cpuacct:/kubepods/pod1\n0::/\n");
        assert_eq!(v1[0], "/sys/fs/cgroup/cpu/kubepods/pod1/cpu.stat");
        assert_eq!(v1[1], "/sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.stat");
        assert!(v1.contains(&"/sys/fs/cgroup/cpu.stat".to_owned()));
    }

    #[test]
    fn a_point_reads_the_difference_and_names_only_real_throttling() {
        let before = CpuThrottling {
            periods: 10,
            throttled_periods: 1,
            throttled_ms: 5.0,
        };
        let after = CpuThrottling {
            periods: 50,
            throttled_periods: 13,
            throttled_ms: 835.0,
        };
        let over = after.since(&before);
        assert_eq!(
            over.evidence().as_deref(),
            Some("its cgroup's CPU limit stopped it in 12 of 40 periods (830 ms)")
        );
        assert_eq!(before.since(&after), CpuThrottling::default());
        assert_eq!(CpuThrottling::default().evidence(), None);
        assert_eq!(over.add(&over).throttled_periods, 24);
    }
}
