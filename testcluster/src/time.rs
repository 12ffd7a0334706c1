//! Timestamps as the API server writes them.

use jiff::Timestamp;

/// RFC 3339 at second precision (`metav1.Time`).
pub fn now() -> String {
    format_seconds(Timestamp::now())
}

/// Truncated to the second, as `metav1.Time` marshals (never a time in the future).
pub fn format_seconds(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 3339 with microseconds (`metav1.MicroTime`, used by events.k8s.io and Leases).
pub fn now_micro() -> String {
    Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string()
}

/// Seconds since an RFC 3339 timestamp (0 when it does not parse).
pub fn age_seconds(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<Timestamp>()
        .map(|t| Timestamp::now().as_second() - t.as_second())
        .unwrap_or(0)
}

/// `duration.HumanDuration` of apimachinery, which `kubectl get` prints in its AGE column.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let s = seconds.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        match s % 60 {
            0 => format!("{m}m"),
            r => format!("{m}m{r}s"),
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        match m % 60 {
            0 => format!("{h}h"),
            r => format!("{h}h{r}m"),
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        match h % 24 {
            0 => format!("{d}d"),
            r => format!("{d}d{r}h"),
        }
    } else if h < 24 * 365 * 2 {
        format!("{d}d")
    } else if h < 24 * 365 * 8 {
        let y = d / 365;
        match d % 365 {
            0 => format!("{y}y"),
            r => format!("{y}y{r}d"),
        }
    } else {
        format!("{}y", d / 365)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_apimachinery() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(9 * 3600), "9h");
        assert_eq!(human_duration(3 * 86_400 + 3600), "3d1h");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn seconds_format_has_no_fraction() {
        let t: Timestamp = "2026-01-02T03:04:05.6Z".parse().unwrap();
        assert_eq!(format_seconds(t), "2026-01-02T03:04:05Z");
    }
}
