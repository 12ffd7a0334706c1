//! How numbers are written wherever a person or a file name reads them: one rule, a fixed
//! number of decimals with the trailing zeros and point dropped (`12`, `12.5`, `0.33`),
//! never `-0`.

/// `x` with at most `places` decimals and no trailing zeros: `decimal(12.50, 2)` is `12.5`,
/// `decimal(12.0, 3)` is `12`, and a value that rounds to zero from below is `0`.
pub fn decimal(x: f64, places: usize) -> String {
    let s = format!("{x:.places$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        &s
    };
    if s == "-0" { "0".into() } else { s.into() }
}

/// A rate as a point's folder and label: three decimals at most (`12.5`, `8`, `6.69`).
pub fn rate_label(rate: f64) -> String {
    decimal(rate, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_drop_their_trailing_zeros_and_never_read_minus_zero() {
        assert_eq!(decimal(12.0, 2), "12");
        assert_eq!(decimal(12.5, 2), "12.5");
        assert_eq!(decimal(1.0 / 3.0, 2), "0.33");
        assert_eq!(decimal(100.0, 0), "100");
        assert_eq!(decimal(-0.0001, 2), "0");
        assert_eq!(decimal(-1.25, 4), "-1.25");
        assert_eq!(rate_label(12.0), "12");
        assert_eq!(rate_label(12.5), "12.5");
        assert_eq!(rate_label(6.69), "6.69");
        assert_eq!(rate_label(6.6666), "6.667");
    }
}
