"""The chi-square test of homogeneity the simulator's dynamic-circuit tests use against Aer."""
from scipy.stats import chi2_contingency


def homogeneity(aer, ours):
    """p-value and degrees of freedom of a chi-square test between two samples of counts.

    Outcomes seen fewer than 10 times in both together are pooled into one category, so that
    every expected count is large enough for the chi-square approximation.
    """
    keys = sorted(set(aer) | set(ours))
    rows = [[], []]
    rare = [0, 0]
    for k in keys:
        a, o = aer.get(k, 0), ours.get(k, 0)
        if a + o < 10:
            rare[0] += a
            rare[1] += o
        else:
            rows[0].append(a)
            rows[1].append(o)
    if rare[0] + rare[1] > 0:
        rows[0].append(rare[0])
        rows[1].append(rare[1])
    if len(rows[0]) < 2:
        # One outcome in both: the samples agree exactly.
        return 1.0, 0
    _, p, dof, _ = chi2_contingency(rows, correction=False)
    return float(p), int(dof)
