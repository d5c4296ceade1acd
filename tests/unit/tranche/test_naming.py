"""Namespace derivation: DNS-1123 labels, at most 63 characters, unique per pair."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tranche.naming import DNS_LABEL, derive_namespace, dns_slug


def test_shape():
    ns = derive_namespace("acme-labs", "inference")
    assert ns.startswith("t-acme-labs-inference-")
    assert len(ns) == len("t-acme-labs-inference-") + 6


def test_no_collision_on_dash_split():
    assert derive_namespace("a-b", "c") != derive_namespace("a", "b-c")


def test_slug():
    assert dns_slug("Carol & Co!") == "carol-co"
    assert dns_slug("ÄÖÜ") == "x"


@given(st.text(max_size=200), st.text(max_size=200))
def test_always_a_dns_label(org, project):
    ns = derive_namespace(dns_slug(org), dns_slug(project))
    assert len(ns) <= 63
    assert DNS_LABEL.match(ns), ns


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_distinct_pairs_distinct_names(a, b):
    if dns_slug(a) != dns_slug(b):
        assert derive_namespace("org", dns_slug(a)) != derive_namespace("org", dns_slug(b))
