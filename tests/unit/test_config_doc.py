"""The configuration page is generated from the dataclasses and committed: it must not go stale; --help stays
one line per option, with the experimental options in a group of their own and the saved groups unchanged."""
from __future__ import annotations

from dataclasses import fields

from ba3c.config import _GROUPS, EXPERIMENTAL_GROUP, Config, build_parser
from ba3c.config_doc import render
from conftest import ROOT

PAGE = ROOT / "docs" / "configuration.md"


def test_the_committed_configuration_page_is_current():
    assert PAGE.read_text() == render(), "docs/configuration.md is stale: run `make docs` and commit it"


def test_every_option_is_on_the_page_with_its_default_and_long_story():
    page = render()
    for cls in _GROUPS.values():
        for f in fields(cls):
            flag = "--" + f.name.replace("_", "-")
            assert f"**`{flag}`**" in page and f"default `{f.default!r}`" in page
            assert f.metadata["doc"] in page
            for choice in f.metadata.get("choices") or ():
                assert choice in page


def test_help_strings_are_one_short_line():
    for cls in _GROUPS.values():
        for f in fields(cls):
            text = f.metadata["help"]
            assert "\n" not in text and len(text) <= 90, f"--{f.name}: help longer than one line ({len(text)})"
            assert text == text.strip() and not text.endswith("."), f"--{f.name}: help is a phrase, no full stop"


def test_experimental_options_are_grouped_in_help_but_saved_in_their_own_group():
    parser = build_parser()
    groups = {g.title: {a.dest for a in g._group_actions} for g in parser._action_groups}
    experimental = {f.name for cls in _GROUPS.values() for f in fields(cls) if f.metadata["experimental"]}
    assert {"allreduce", "compression", "noise_scale_every", "decorrelate_steps"} <= experimental
    assert groups[EXPERIMENTAL_GROUP[0]] == experimental
    for gname, cls in _GROUPS.items():
        assert groups[gname] == {f.name for f in fields(cls)} - experimental
    saved = Config().to_dict()
    assert list(saved) == ["sim", "learn", "run", "gorila"]
    assert "allreduce" in saved["learn"] and "sticky_actions" in saved["sim"]
    assert EXPERIMENTAL_GROUP[0] in parser.format_help()
