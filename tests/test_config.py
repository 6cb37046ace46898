"""The typed config: documented defaults match the code, precedence, and errors that name the key."""

from __future__ import annotations

import dataclasses

import pytest

from crawl.config import ConfigError, CrawlConfig, default_config_path, load_config


def test_documented_yaml_matches_dataclass_defaults():
    from_yaml = load_config(default_config_path(), use_env=False)
    assert dataclasses.asdict(from_yaml) == dataclasses.asdict(CrawlConfig())
    documented = {line.split(":", 1)[0] for line in default_config_path().read_text().splitlines()
                  if line and not line.startswith((" ", "#"))}
    assert documented == {f.name for f in dataclasses.fields(CrawlConfig)}


def test_precedence_file_env_overrides(tmp_path, monkeypatch):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("max_pages: 10\npoliteness_delay_s: 2\n")
    monkeypatch.setenv("CRAWL_MAX_PAGES", "20")
    cfg = load_config(cfg_file, {"politeness_delay_s": 0.5, "max_depth": None})
    assert cfg.max_pages == 20 and cfg.politeness_delay_s == 0.5 and cfg.max_depth == 15
    monkeypatch.setenv("CRAWL_RESOLVE", "*.sim.test=127.0.0.1:8080,a.test=127.0.0.1:1")
    assert load_config().resolve == ("*.sim.test=127.0.0.1:8080", "a.test=127.0.0.1:1")


@pytest.mark.parametrize("overrides, key", [
    ({"politeness_delay_s": -1}, "politeness_delay_s"),
    ({"max_pages": 0}, "max_pages"),
    ({"coverage_share": 1.5}, "coverage_share"),
    ({"crawl_id": "Bad Name"}, "crawl_id"),
    ({"max_pages": "many"}, "max_pages"),
    ({"resolve": ["nonsense"]}, "resolve"),
    ({"politeness_key": "planet"}, "politeness_key"),
    ({"allowed_hosts": "(["}, "allowed_hosts"),
    ({"allowed_hosts": r"^(?!other\.)"}, "allowed_hosts"),  # look-ahead: RE2 cannot run it
    ({"allowed_hosts": r"(a)\1"}, "allowed_hosts"),  # backreference
    ({"allowed_hosts": "a" * 1001}, "allowed_hosts"),
    ({"render_hosts": "spa-*.example.com, a/b"}, "render_hosts"),
    ({"render_resource_types": ["script", "bogus"]}, "render_resource_types"),
    ({"render_concurrency": 0}, "render_concurrency"),
    ({"crawl_id": "demo\n"}, "crawl_id"),  # matched whole: re's $ alone would accept the newline
    ({"no_such_key": 1}, "no_such_key"),
])
def test_invalid_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=overrides, use_env=False)
    assert str(err.value).startswith(key)


def test_refused_scope_pattern_says_why():
    with pytest.raises(ConfigError, match=r"allowed_hosts: .*RE2.*look-arounds"):
        load_config(overrides={"allowed_hosts": r"^(?!other\.)"}, use_env=False)


@pytest.mark.timeout(60)
def test_pathological_scope_pattern_runs_in_linear_time():
    """``^(a+)+$`` backtracks exponentially in Python's re (minutes for 30 a's and a dot); RE2 is linear.
    Both the scalar and the column path answer; the generous timeout only catches a backtracking engine."""
    import numpy as np
    import pyarrow as pa

    from crawl.scope import host_allowed, hosts_allowed

    evil = "a" * 40 + ".example"
    assert not host_allowed(evil, "^(a+)+$") and host_allowed("a" * 40, "^(a+)+$")
    got = hosts_allowed(pa.array([evil, "a" * 5000, None, "b"]), "^(a+)+$")
    assert got.tolist() == [False, True, False, False]
    assert hosts_allowed(pa.array(["x"]), "").dtype == np.bool_


def test_unknown_key_in_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("max_pagez: 3\n")
    with pytest.raises(ConfigError, match="max_pagez"):
        load_config(f)
