//! Summary statistics of repeated runs and the comparison rule of paper 002: a difference
//! whose 95 % confidence intervals overlap is "no difference", never a win.

use serde::Serialize;

/// Two-sided 97.5 % quantiles of Student's t for 1..=30 degrees of freedom.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// t quantile for a 95 % two-sided interval with `df` degrees of freedom (normal beyond 30:
/// 1.96, slightly narrow for df 31..120).
pub fn t95(df: usize) -> f64 {
    match df {
        0 => f64::NAN,
        1..=30 => T975[df - 1],
        _ => 1.96,
    }
}

/// Mean, sample standard deviation and 95 % confidence interval of the mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for one sample.
    pub sd: f64,
    /// Half-width of the 95 % confidence interval of the mean (NaN-free: 0 for one sample,
    /// which the comparison treats as "cannot tell").
    pub ci95: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    /// `None` for no samples or a non-finite one.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        if xs.is_empty() || xs.iter().any(|x| !x.is_finite()) {
            return None;
        }
        let n = xs.len();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let (sd, ci95) = if n > 1 {
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let sd = var.sqrt();
            (sd, t95(n - 1) * sd / (n as f64).sqrt())
        } else {
            (0.0, 0.0)
        };
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Summary {
            n,
            mean,
            sd,
            ci95,
            min,
            max,
        })
    }

    pub fn low(&self) -> f64 {
        self.mean - self.ci95
    }

    pub fn high(&self) -> f64 {
        self.mean + self.ci95
    }
}

/// How `a` compares with `b` for a higher-is-better measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// a's interval lies wholly above b's.
    Higher,
    /// a's interval lies wholly below b's.
    Lower,
    /// The intervals overlap (or a side has fewer than two runs): no difference shown.
    NoDifference,
}

pub fn compare(a: &Summary, b: &Summary) -> Verdict {
    if a.n < 2 || b.n < 2 {
        Verdict::NoDifference
    } else if a.low() > b.high() {
        Verdict::Higher
    } else if a.high() < b.low() {
        Verdict::Lower
    } else {
        Verdict::NoDifference
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-3
    }

    #[test]
    fn known_values() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample sd sqrt(32/7) = 2.138
        let s = Summary::of(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!(close(s.mean, 5.0));
        assert!(close(s.sd, (32.0f64 / 7.0).sqrt()));
        // t(7) = 2.365: 2.365 * 2.138 / sqrt(8) = 1.7875
        assert!(
            close(s.ci95, 2.365 * (32.0f64 / 7.0).sqrt() / 8f64.sqrt()),
            "{}",
            s.ci95
        );
        assert_eq!((s.min, s.max), (2.0, 9.0));
        // five runs 10, 12, 11, 13, 9: mean 11, sd 1.5811, ci 2.776 * 1.5811 / sqrt 5 = 1.963
        let s = Summary::of(&[10.0, 12.0, 11.0, 13.0, 9.0]).unwrap();
        assert!(
            close(s.mean, 11.0) && close(s.sd, 1.5811) && close(s.ci95, 1.9630),
            "{s:?}"
        );
    }

    #[test]
    fn degenerate_inputs() {
        assert_eq!(Summary::of(&[]), None);
        assert_eq!(Summary::of(&[1.0, f64::NAN]), None);
        let one = Summary::of(&[3.0]).unwrap();
        assert_eq!((one.sd, one.ci95), (0.0, 0.0));
        assert!(t95(0).is_nan());
        assert_eq!(t95(1), 12.706);
        assert_eq!(t95(1000), 1.96);
    }

    #[test]
    fn overlapping_intervals_are_no_difference() {
        let a = Summary::of(&[10.0, 11.0, 12.0]).unwrap();
        let b = Summary::of(&[10.5, 11.5, 12.5]).unwrap();
        assert_eq!(compare(&a, &b), Verdict::NoDifference);
        let c = Summary::of(&[20.0, 20.5, 21.0]).unwrap();
        assert_eq!(compare(&c, &a), Verdict::Higher);
        assert_eq!(compare(&a, &c), Verdict::Lower);
        // one run each: never a verdict
        let x = Summary::of(&[1.0]).unwrap();
        let y = Summary::of(&[100.0]).unwrap();
        assert_eq!(compare(&y, &x), Verdict::NoDifference);
    }
}
