//! Tick-label text: short enough for a 400 px chart, no needless decimals.

/// Token counts: 950, 1.5K, 32K, 1.2M.
pub(crate) fn tokens(v: f64) -> String {
    let a = v.abs();
    if a < 1_000.0 {
        format!("{v:.0}")
    } else if a < 10_000.0 {
        trim(format!("{:.1}", v / 1e3)) + "K"
    } else if a < 1e6 {
        format!("{:.0}K", v / 1e3)
    } else {
        trim(format!("{:.1}", v / 1e6)) + "M"
    }
}

/// A plain tick value with at most two decimals and no trailing zeros
/// (plotters picks round steps, so this prints 0.5, 12, 2.25).
pub(crate) fn number(v: f64) -> String {
    // "-0" from a value a hair below zero reads like a bug.
    let v = if v.abs() < 1e-9 { 0.0 } else { v };
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.2}"))
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_short() {
        assert_eq!(tokens(0.0), "0");
        assert_eq!(tokens(950.0), "950");
        assert_eq!(tokens(1_000.0), "1K");
        assert_eq!(tokens(1_500.0), "1.5K");
        assert_eq!(tokens(32_768.0), "33K");
        assert_eq!(tokens(1_250_000.0), "1.2M");
    }

    #[test]
    fn numbers_drop_trailing_zeros() {
        assert_eq!(number(0.0), "0");
        assert_eq!(number(-1e-12), "0");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(2.25), "2.25");
        assert_eq!(number(12.0), "12");
        assert_eq!(number(250.0), "250");
    }
}
