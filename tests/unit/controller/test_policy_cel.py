"""The CEL builders quote what they must and only that: a literal can never end early."""

from __future__ import annotations

from controller.render.policies import cel


def test_literal_escapes_quotes_and_backslashes() -> None:
    assert cel.lit("it's") == r"'it\'s'"
    assert cel.lit("a\\b") == r"'a\\b'"
    assert cel.str_list(["x", "y'"]) == r"['x', 'y\'']"


def test_message_quotes_text_and_keeps_expressions() -> None:
    names = cel.joined("variables.bad")
    assert cel.message("Container(s) ", names, " won't run.") == (
        r"'Container(s) ' + variables.bad.join(', ') + ' won\'t run.'"
    )


def test_expressions_compose_without_hand_joined_strings() -> None:
    assert cel.starts_with_any("k", ["a/", "b/"]) == "k.startsWith('a/') || k.startsWith('b/')"
    assert cel.absent_or_empty("x.sel") == "(!has(x.sel) || size(x.sel) == 0)"
    assert cel.set_and_true("c.sc", "c.sc.priv") == "has(c.sc) && has(c.sc.priv) && c.sc.priv"
    assert cel.or_default("o.init", "[]") == "(has(o.init) ? o.init : [])"
