//! Evaluation measures of a click model: exact ROC AUC and mean log-loss.

/// The exact area under the ROC curve of `scores` against `labels` (1 positive, anything else
/// negative): the probability that a random positive scores above a random negative, ties
/// counting one half. Computed from the rank sum (Mann–Whitney U) after sorting the scores, tied
/// scores sharing their average rank; O(n log n). `scores` and `labels` have one entry per
/// sample (the shorter length counts). Returns 0.5 when there is no positive or no negative;
/// NaN scores sort last.
pub fn auc(scores: &[f32], labels: &[f32]) -> f64 {
    let n = scores.len().min(labels.len());
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_unstable_by(|&a, &b| scores[a as usize].total_cmp(&scores[b as usize]));
    let (mut pos, mut rank_sum) = (0u64, 0f64);
    let mut i = 0;
    while i < n {
        // The tie group [i, j) of equal scores has ranks i + 1 ..= j: average (i + 1 + j) / 2.
        let s = scores[order[i] as usize];
        let mut j = i + 1;
        while j < n && scores[order[j] as usize] == s {
            j += 1;
        }
        let avg = (i + 1 + j) as f64 / 2.0;
        let group_pos = order[i..j]
            .iter()
            .filter(|&&k| labels[k as usize] == 1.0)
            .count() as u64;
        pos += group_pos;
        rank_sum += avg * group_pos as f64;
        i = j;
    }
    let neg = n as u64 - pos;
    if pos == 0 || neg == 0 {
        return 0.5;
    }
    let u = rank_sum - (pos * (pos + 1)) as f64 / 2.0;
    u / (pos as f64 * neg as f64)
}

/// Mean log-loss (natural log) of probabilities `p` against 0/1 `labels`, each probability
/// clamped to [1e-7, 1 − 1e-7]; 0 for no samples.
pub fn logloss(p: &[f32], labels: &[f32]) -> f64 {
    let n = p.len().min(labels.len());
    let total: f64 = p
        .iter()
        .zip(labels)
        .map(|(&p, &y)| {
            let p = (p as f64).clamp(1e-7, 1.0 - 1e-7);
            -(y as f64 * p.ln() + (1.0 - y as f64) * (1.0 - p).ln())
        })
        .sum();
    total / n.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_reversed_and_constant_scores() {
        let y = [0.0, 0.0, 1.0, 1.0];
        assert_eq!(auc(&[0.1, 0.2, 0.8, 0.9], &y), 1.0);
        assert_eq!(auc(&[0.9, 0.8, 0.2, 0.1], &y), 0.0);
        assert_eq!(auc(&[0.5; 4], &y), 0.5);
    }

    #[test]
    fn by_hand_with_ties() {
        // Positives score 0.8 and 0.4, negatives 0.4 and 0.1. Pairs (pos, neg): (0.8, 0.4) 1,
        // (0.8, 0.1) 1, (0.4, 0.4) ½, (0.4, 0.1) 1: 3.5 / 4.
        let got = auc(&[0.4, 0.8, 0.1, 0.4], &[0.0, 1.0, 0.0, 1.0]);
        assert_eq!(got, 0.875);
        // One positive among three negatives, below one of them: 2 / 3.
        let got = auc(&[0.3, 0.1, 0.9, 0.2], &[1.0, 0.0, 0.0, 0.0]);
        assert!((got - 2.0 / 3.0).abs() < 1e-12, "{got}");
    }

    #[test]
    fn one_class_only_is_a_half() {
        assert_eq!(auc(&[0.1, 0.9], &[1.0, 1.0]), 0.5);
        assert_eq!(auc(&[], &[]), 0.5);
    }

    #[test]
    fn logloss_by_hand() {
        let l = logloss(&[0.5, 0.9], &[1.0, 0.0]);
        let want = (-(0.5f64.ln()) - (0.1f32 as f64).ln()) / 2.0;
        assert!((l - want).abs() < 1e-6, "{l} vs {want}");
    }
}
