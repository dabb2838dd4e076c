//! Statistics of repeated runs (issue 20): summaries with Student-t intervals, paired
//! comparisons on the ratio of rates (a t-interval on the mean of log ratios, and a percentile
//! bootstrap beside it), the verdict rule, and outlier flags (shown, never dropped).
//!
//! The verdict rule: a target is `higher` (`lower`) than the baseline when the 95 % interval
//! of its paired ratio lies wholly above (below) 1; `no_difference` only when the interval
//! contains 1 *and* lies within [`NO_DIFFERENCE_BAND`] of 1; otherwise (contains 1 but wider)
//! `inconclusive`: the runs cannot tell. Fewer than two pairs are always `inconclusive`.

use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Two-sided 97.5 % quantiles of Student's t for 1..=30 degrees of freedom.
const T975: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The 97.5 % quantile of the standard normal distribution.
const Z975: f64 = 1.959_963_984_540_054;

/// t quantile for a 95 % two-sided interval with `df` degrees of freedom: the table up to 30,
/// beyond it the Cornish-Fisher expansion in 1/df to the third order (within 1e-4 of the exact
/// quantile from df 30 on: 2.0423 at 30, 1.9840 at 120).
pub fn t95(df: usize) -> f64 {
    match df {
        0 => f64::NAN,
        1..=30 => T975[df - 1],
        _ => {
            let (z, n) = (Z975, df as f64);
            let g1 = (z.powi(3) + z) / 4.0;
            let g2 = (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / 96.0;
            let g3 = (3.0 * z.powi(7) + 19.0 * z.powi(5) + 17.0 * z.powi(3) - 15.0 * z) / 384.0;
            z + g1 / n + g2 / (n * n) + g3 / (n * n * n)
        }
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
    /// which a comparison treats as "cannot tell").
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

/// How a target compares with the baseline for a higher-is-better measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The ratio's 95 % interval lies wholly above 1.
    Higher,
    /// The ratio's 95 % interval lies wholly below 1.
    Lower,
    /// The interval contains 1 and lies within ±[`NO_DIFFERENCE_BAND`] of it.
    NoDifference,
    /// The interval contains 1 but is wider than that band, or there are fewer than two
    /// pairs: the runs cannot tell.
    Inconclusive,
}

/// How close to 1 the whole interval of a ratio must lie for "no difference": within
/// 1 − 0.05 .. 1 + 0.05.
pub const NO_DIFFERENCE_BAND: f64 = 0.05;

/// The verdict on a ratio whose 95 % interval is `low .. high` (see the module text).
pub fn verdict(low: f64, high: f64) -> Verdict {
    if !(low.is_finite() && high.is_finite()) {
        Verdict::Inconclusive
    } else if low > 1.0 {
        Verdict::Higher
    } else if high < 1.0 {
        Verdict::Lower
    } else if low >= 1.0 - NO_DIFFERENCE_BAND && high <= 1.0 + NO_DIFFERENCE_BAND {
        Verdict::NoDifference
    } else {
        Verdict::Inconclusive
    }
}

/// Resamples of the percentile bootstrap.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// A paired comparison: per repetition the ratio target/baseline of that repetition's rates;
/// the geometric mean of the ratios with the 95 % t-interval of the mean log ratio, taken back
/// with exp (so the interval is not symmetric around the ratio).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedRatio {
    /// Pairs (repetitions both sides ran with a positive, finite rate).
    pub n: usize,
    /// exp(mean of ln ratio): the geometric mean of the paired ratios.
    pub ratio: f64,
    /// exp(mean ∓ t95(n−1)·sd/√n) of the log ratios; `None` below two pairs.
    pub ci95_low: Option<f64>,
    pub ci95_high: Option<f64>,
    /// The 2.5 % and 97.5 % percentiles of the geometric mean over
    /// [`BOOTSTRAP_RESAMPLES`] resamples of the pairs (seeded, so repeatable); shown beside
    /// the t-interval, not used for the verdict. `None` below two pairs.
    pub bootstrap95_low: Option<f64>,
    pub bootstrap95_high: Option<f64>,
    /// Sample standard deviation of the log ratios.
    pub log_sd: f64,
    /// From the t-interval.
    pub verdict: Verdict,
}

/// Compares paired samples: `target[i]` and `baseline[i]` come from the same repetition.
/// Pairs with a non-positive or non-finite rate on either side are left out (a log ratio
/// needs both positive).
pub fn paired_ratio(target: &[f64], baseline: &[f64]) -> PairedRatio {
    let logs: Vec<f64> = target
        .iter()
        .zip(baseline)
        .filter(|(t, b)| t.is_finite() && b.is_finite() && **t > 0.0 && **b > 0.0)
        .map(|(t, b)| (t / b).ln())
        .collect();
    let n = logs.len();
    let Some(s) = Summary::of(&logs) else {
        return PairedRatio {
            n: 0,
            ratio: f64::NAN,
            ci95_low: None,
            ci95_high: None,
            bootstrap95_low: None,
            bootstrap95_high: None,
            log_sd: 0.0,
            verdict: Verdict::Inconclusive,
        };
    };
    if n < 2 {
        return PairedRatio {
            n,
            ratio: s.mean.exp(),
            ci95_low: None,
            ci95_high: None,
            bootstrap95_low: None,
            bootstrap95_high: None,
            log_sd: 0.0,
            verdict: Verdict::Inconclusive,
        };
    }
    let (low, high) = (s.low().exp(), s.high().exp());
    let (bl, bh) = bootstrap_mean(&logs, BOOTSTRAP_RESAMPLES, 0x6d6f_6166_7362);
    PairedRatio {
        n,
        ratio: s.mean.exp(),
        ci95_low: Some(low),
        ci95_high: Some(high),
        bootstrap95_low: Some(bl.exp()),
        bootstrap95_high: Some(bh.exp()),
        log_sd: s.sd,
        verdict: verdict(low, high),
    }
}

/// The percentile bootstrap of the mean of `xs`: the 2.5 % and 97.5 % quantiles (nearest
/// rank) of the means of `resamples` samples drawn with replacement, from an RNG seeded with
/// `seed`.
pub fn bootstrap_mean(xs: &[f64], resamples: usize, seed: u64) -> (f64, f64) {
    if xs.is_empty() || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = xs.len();
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| xs[rng.gen_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * resamples as f64).ceil() as usize).clamp(1, resamples) - 1];
    (at(0.025), at(0.975))
}

/// The `q` quantile of sorted `xs` by linear interpolation between closest ranks (Hyndman and
/// Fan's type 7, the default of R and NumPy).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * q.clamp(0.0, 1.0);
            let (lo, frac) = (h.floor() as usize, h - h.floor());
            let hi = (lo + 1).min(n - 1);
            sorted[lo] + frac * (sorted[hi] - sorted[lo])
        }
    }
}

/// The median absolute deviation scaled by 1.4826 (a consistent estimate of the standard
/// deviation for normal data), and the median.
pub fn mad(xs: &[f64]) -> (f64, f64) {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let med = quantile(&s, 0.5);
    let mut dev: Vec<f64> = xs.iter().map(|x| (x - med).abs()).collect();
    dev.sort_by(f64::total_cmp);
    (med, 1.4826 * quantile(&dev, 0.5))
}

/// One value flagged as an outlier: which repetition, its value, and by which rules
/// (`tukey`: outside Q1 − 1.5·IQR .. Q3 + 1.5·IQR; `mad`: more than 3 scaled MADs from the
/// median). Flagged values stay in every mean and interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outlier {
    pub rep: usize,
    pub value: f64,
    pub rules: Vec<&'static str>,
}

/// Outliers of `(rep, value)` samples (at least 3 needed; none flagged below that). The MAD
/// rule is skipped when the MAD is 0 (more than half the values equal).
pub fn outliers(samples: &[(usize, f64)]) -> Vec<Outlier> {
    let xs: Vec<f64> = samples
        .iter()
        .map(|s| s.1)
        .filter(|x| x.is_finite())
        .collect();
    if xs.len() < 3 {
        return Vec::new();
    }
    let mut sorted = xs.clone();
    sorted.sort_by(f64::total_cmp);
    let (q1, q3) = (quantile(&sorted, 0.25), quantile(&sorted, 0.75));
    let iqr = q3 - q1;
    let (lo, hi) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
    let (med, mad) = mad(&xs);
    samples
        .iter()
        .filter(|s| s.1.is_finite())
        .filter_map(|&(rep, value)| {
            let mut rules = Vec::new();
            if value < lo || value > hi {
                rules.push("tukey");
            }
            if mad > 0.0 && (value - med).abs() > 3.0 * mad {
                rules.push("mad");
            }
            (!rules.is_empty()).then_some(Outlier { rep, value, rules })
        })
        .collect()
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
    }

    #[test]
    fn t_quantiles_beyond_the_table() {
        // published values of t(0.975; df)
        for (df, want) in [
            (31, 2.0395),
            (40, 2.0211),
            (60, 2.0003),
            (120, 1.9799),
            (1000, 1.9623),
        ] {
            assert!(
                (t95(df) - want).abs() < 1e-4,
                "df {df}: {} vs {want}",
                t95(df)
            );
        }
        // it joins the table, and goes down towards the normal quantile
        assert!(t95(31) < t95(30) && t95(30) - t95(31) < 0.005);
        assert!(t95(1_000_000) > Z975 && t95(1_000_000) - Z975 < 1e-5);
    }

    #[test]
    fn log_ratio_t_interval_of_a_small_sample() {
        // Ratios 2, 4, 8 (ln: 0.6931, 1.3863, 2.0794): mean ln 1.3863 = ln 4, so the geometric
        // mean is 4; sd of the logs 0.6931 (= ln 2); t(2) = 4.303; half-width
        // 4.303 * 0.6931 / sqrt 3 = 1.7220; interval exp(1.3863 ∓ 1.7220) = 0.7148 .. 22.383.
        let base = [100.0, 50.0, 10.0];
        let target = [200.0, 200.0, 80.0];
        let p = paired_ratio(&target, &base);
        assert_eq!(p.n, 3);
        assert!(close(p.ratio, 4.0), "{p:?}");
        assert!(close(p.log_sd, 2f64.ln()), "{p:?}");
        assert!(close(p.ci95_low.unwrap(), 0.7148), "{p:?}");
        assert!(close(p.ci95_high.unwrap(), 22.3831), "{p:?}");
        // contains 1 and is far wider than ±5 %: the three runs cannot tell
        assert_eq!(p.verdict, Verdict::Inconclusive);
        // the bootstrap's interval lies within the sample's range: 2 .. 8
        let (bl, bh) = (p.bootstrap95_low.unwrap(), p.bootstrap95_high.unwrap());
        assert!((2.0..=8.0).contains(&bl) && (2.0..=8.0).contains(&bh) && bl < bh);

        // Ratios 1.1, 1.2, 1.0, 1.3, 1.15 (ln mean 0.13595, sd 0.09783, t(4) 2.776,
        // half-width 0.12145): 1.1456 × (1.0146 .. 1.2936) — higher.
        let base = [10.0; 5];
        let target = [11.0, 12.0, 10.0, 13.0, 11.5];
        let p = paired_ratio(&target, &base);
        assert!(close(p.ratio, 1.1456), "{p:?}");
        assert!(close(p.ci95_low.unwrap(), 1.0146), "{p:?}");
        assert!(close(p.ci95_high.unwrap(), 1.2936), "{p:?}");
        assert_eq!(p.verdict, Verdict::Higher);
        // and the other way round: exactly the reciprocal, lower
        let q = paired_ratio(&base, &target);
        assert!(close(q.ratio, 1.0 / p.ratio));
        assert!(close(q.ci95_low.unwrap(), 1.0 / p.ci95_high.unwrap()));
        assert_eq!(q.verdict, Verdict::Lower);
    }

    #[test]
    fn pairing_removes_what_the_repetitions_share() {
        // The baseline drifts 10× between repetitions and the target is always 2 % faster in
        // the same repetition: unpaired intervals overlap, the paired one is tight.
        let base = [100.0, 1000.0, 300.0, 50.0];
        let target: Vec<f64> = base.iter().map(|b| b * 1.02).collect();
        let p = paired_ratio(&target, &base);
        assert!(close(p.ratio, 1.02) && p.log_sd < 1e-9, "{p:?}");
        // identical ratios: a zero-width interval above 1
        assert_eq!(p.verdict, Verdict::Higher);
        let (a, b) = (Summary::of(&target).unwrap(), Summary::of(&base).unwrap());
        assert!(a.low() < b.high(), "the unpaired intervals overlap");
    }

    #[test]
    fn verdicts_of_constructed_cases() {
        assert_eq!(verdict(1.01, 1.2), Verdict::Higher);
        assert_eq!(verdict(0.5, 0.99), Verdict::Lower);
        assert_eq!(verdict(0.97, 1.04), Verdict::NoDifference);
        assert_eq!(verdict(0.95, 1.05), Verdict::NoDifference);
        assert_eq!(verdict(0.90, 1.04), Verdict::Inconclusive);
        assert_eq!(verdict(0.97, 1.30), Verdict::Inconclusive);
        assert_eq!(verdict(f64::NAN, 1.0), Verdict::Inconclusive);
        // ratios 0.99, 1.01, 1.00, 1.00: 1.0000 × (0.9871 .. 1.0131), tight around 1
        let p = paired_ratio(&[99.0, 101.0, 100.0, 100.0], &[100.0; 4]);
        assert!(close(p.ci95_low.unwrap(), 0.9871) && close(p.ci95_high.unwrap(), 1.0131));
        assert_eq!(p.verdict, Verdict::NoDifference, "{p:?}");
        // ratios 0.8, 1.25, 1.0, 1.0: 1.0 × (0.7484 .. 1.3363), around 1 but wide
        let p = paired_ratio(&[80.0, 125.0, 100.0, 100.0], &[100.0; 4]);
        assert!(close(p.ci95_low.unwrap(), 0.7484) && close(p.ci95_high.unwrap(), 1.3363));
        assert_eq!(p.verdict, Verdict::Inconclusive, "{p:?}");
        // one pair, however large the ratio: inconclusive, no interval
        let p = paired_ratio(&[1000.0], &[1.0]);
        assert_eq!((p.n, p.verdict), (1, Verdict::Inconclusive));
        assert!(close(p.ratio, 1000.0) && p.ci95_low.is_none());
        // pairs with a zero rate are left out
        let p = paired_ratio(&[0.0, 2.0, 2.0], &[1.0, 1.0, 1.0]);
        assert_eq!(p.n, 2);
        assert_eq!(paired_ratio(&[], &[]).verdict, Verdict::Inconclusive);
    }

    #[test]
    fn quantiles_mad_and_outliers_of_known_samples() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        // type 7: h = 9q; Q1 at 2.25 → 3.25, Q3 at 6.75 → 7.75
        assert!(close(quantile(&s, 0.25), 3.25) && close(quantile(&s, 0.75), 7.75));
        assert!(close(quantile(&s, 0.5), 5.5));
        // 1, 2, 3, 4, 100: median 3, |deviations| 2 1 0 1 97 → MAD 1, scaled 1.4826
        let (med, m) = mad(&[1.0, 2.0, 3.0, 4.0, 100.0]);
        assert!(close(med, 3.0) && close(m, 1.4826));
        // runs 10, 11, 10.5, 9.8, 30: Q1 10, Q3 11, fences 8.5 .. 12.5; 30 is out by both rules
        let runs = [(1, 10.0), (2, 11.0), (3, 10.5), (4, 9.8), (5, 30.0)];
        let o = outliers(&runs);
        assert_eq!(o.len(), 1, "{o:?}");
        assert_eq!((o[0].rep, o[0].value), (5, 30.0));
        assert_eq!(o[0].rules, ["tukey", "mad"]);
        // 1, 2, 3, 4, 5.2: Tukey fences (Q1 2, Q3 4) are -1 .. 7, MAD 1.4826 → none
        assert!(outliers(&[(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.2)]).is_empty());
        // MAD only: 1, 2, 100 (Q1 1.5, Q3 51: fences -72 .. 125; MAD 1 → 1.4826, 98 away)
        let o = outliers(&[(1, 1.0), (2, 2.0), (3, 100.0)]);
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].rules, ["mad"]);
        // too few to judge
        assert!(outliers(&[(1, 1.0), (2, 1000.0)]).is_empty());
    }
}
