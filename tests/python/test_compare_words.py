# SPDX-License-Identifier: Apache-2.0
"""The comparison report's causes come from the library as data (which field, which value) and
the module words them as keyword arguments: `soft_cap=30`, `sinks=None`, never attnref-run's
`--soft-cap 30`. attnref-run words the same causes as its options (tests/cli/test_attnref_run_compare.cpp)."""
import numpy as np

import attnref
from conftest import paged_batch


def only_cause(report):
    assert not report["ok"]
    assert len(report["causes"]) == 1, report["text"]
    return report["causes"][0]


def test_soft_cap_cause_is_worded_as_a_keyword():
    q, k, v, lengths, pi = paged_batch()
    got = attnref.paged_attention(q * 8, k, v, lengths, pi, soft_cap=30.0)
    cause = only_cause(attnref.compare_paged(got, q * 8, k, v, lengths, pi))
    assert cause["reproduce"] == "soft_cap=30"
    report = attnref.compare_paged(got, q * 8, k, v, lengths, pi)
    assert "; reproduce with soft_cap=30\n" in report["text"]
    assert "--" not in report["text"]


def test_sinks_and_window_causes_are_worded_as_keywords():
    q, k, v, lengths, pi = paged_batch()
    sinks = np.full(q.shape[1], 2.0, np.float32)
    got = attnref.paged_attention(q, k, v, lengths, pi)
    cause = only_cause(attnref.compare_paged(got, q, k, v, lengths, pi, sinks=sinks))
    assert cause["reproduce"] == "sinks=None"
    got = attnref.paged_attention(q, k, v, lengths, pi, sliding_window=4)
    cause = only_cause(attnref.compare_paged(got, q, k, v, lengths, pi, sliding_window=5))
    assert cause["reproduce"] == "sliding_window=4"


def test_padding_only_report_names_the_keyword():
    q, k, v, lengths, pi = paged_batch()
    got = attnref.paged_attention(q, k, v, lengths, pi)
    got[1] = 7.0  # the sequence of length 0: padding
    report = attnref.compare_paged(got, q, k, v, lengths, pi)
    assert report["padding_only"]
    assert "ignore_padding=True leaves them out" in report["text"]
