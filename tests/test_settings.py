"""One declaration of the user-facing settings (crawl.config.CrawlSettings): the DAG's trigger-form
Params, the crawl API's request model and the CLI flags all agree with it, field by field (titles,
descriptions, bounds, defaults), and refuse or accept exactly the same values at each bound."""

from __future__ import annotations

import argparse
import functools
import importlib.util

import pytest
from airflow_harness import REPO, configure_env

configure_env()  # before anything imports airflow

from airflow.dag_processing.dagbag import DagBag  # noqa: E402
from airflow.sdk.definitions.param import ParamValidationError  # noqa: E402
from airflow.serialization.serialized_objects import DagSerialization  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from crawl import cli  # noqa: E402
from crawl.config import (  # noqa: E402
    REQUIRED_IN_REQUEST,
    SETTING_KEYS,
    CrawlConfig,
    CrawlSettings,
    describe,
    load_config,
    param_specs,
    seed_item_description,
    seed_pattern,
    setting_default,
    setting_schema,
)

SETTINGS = list(CrawlSettings.model_fields)
BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "minItems", "items")


@pytest.fixture(scope="module")
def dag_module():
    spec = importlib.util.spec_from_file_location("recrawl_dag_settings", REPO / "dags" / "recrawl.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def params():
    """The params as the API server holds them (serialized DAG): what the trigger form shows."""
    dag = DagBag(dag_folder=str(REPO / "dags")).dags["recrawl"]
    return DagSerialization.from_dict(DagSerialization.to_dict(dag)).params


@pytest.fixture(scope="module")
def request_cls():
    spec = importlib.util.spec_from_file_location("crawl_api_settings", REPO / "plugins" / "crawl_api.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.CrawlRequest


@pytest.fixture(scope="module")
def cli_actions() -> dict[str, argparse.Action]:
    run = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
    return {a.dest: a for a in run._actions}


@pytest.fixture
def no_crawl_env(monkeypatch: pytest.MonkeyPatch):
    """Defaults only: no deployment env may leak into the comparison."""
    import os

    for key in [k for k in os.environ if k.startswith("CRAWL_")]:
        monkeypatch.delenv(key)


def test_every_setting_but_seeds_is_a_config_key_with_the_declared_default() -> None:
    assert set(SETTING_KEYS) == set(SETTINGS) - {"seeds"}
    assert set(SETTING_KEYS) <= set(CrawlConfig.__dataclass_fields__)
    for key in SETTING_KEYS:
        assert getattr(CrawlConfig(), key) == setting_default(key), key
    assert "dask_address" not in SETTINGS  # deployment only


@pytest.mark.parametrize("name", SETTINGS)
def test_param_matches_the_declaration(params, name: str) -> None:
    info = CrawlSettings.model_fields[name]
    schema = params.get_param(name).schema
    assert schema["title"] == info.title
    assert params.get_param(name).description == describe(name)
    declared = setting_schema(name)
    if name == "seeds":  # the form's seeds add the engine's seed pattern (the API keeps SeedError's messages)
        declared["items"] = {**declared["items"], "pattern": seed_pattern(("http", "https")),
                             "description": seed_item_description(("http", "https"))}
    for key in BOUND_KEYS:
        assert schema.get(key) == declared.get(key), (name, key)
    if name in REQUIRED_IN_REQUEST:
        assert schema["type"] == declared["type"]
    else:  # optional: nullable, so the form submits with an empty field
        assert schema["type"] == ["null", declared["type"]] and params[name] is None


@pytest.mark.parametrize("name", SETTINGS)
def test_request_field_matches_the_declaration(request_cls, name: str) -> None:
    info = CrawlSettings.model_fields[name]
    schema = request_cls.model_json_schema()
    prop = schema["properties"][name]
    assert prop["title"] == info.title and prop["description"] == describe(name)
    declared = setting_schema(name)
    if name in REQUIRED_IN_REQUEST:
        assert name in schema["required"]
        branch = prop
    else:
        assert name not in schema.get("required", []) and prop["default"] is None
        branch = next(b for b in prop["anyOf"] if b.get("type") != "null")
    for key in BOUND_KEYS:
        assert branch.get(key) == declared.get(key), (name, key)
    assert set(schema["properties"]) - set(SETTINGS) == {"dask_address"}  # where to run: not a setting


@pytest.mark.parametrize("name", SETTING_KEYS)
def test_cli_flag_matches_the_declaration(cli_actions, name: str) -> None:
    info = CrawlSettings.model_fields[name]
    action = cli_actions[name]
    assert "--" + name.replace("_", "-") in action.option_strings
    assert action.type is info.annotation and action.default is None
    assert action.help == f"{info.title}: {describe(name)}"
    assert describe("seeds") in cli_actions["seeds"].help


def test_defaults_agree(params, dag_module, request_cls, no_crawl_env) -> None:
    """The form's defaults, an API request with only crawl id and seeds, and no flags: same config."""
    declared = {k: setting_default(k) for k in SETTING_KEYS}
    form = params.deep_merge(None).validate()
    from_form = load_config(overrides=dag_module.config_overrides(form))
    req = request_cls(crawl_id="demo", seeds=["http://a.example/"]).model_dump(exclude_none=True)
    from_api = load_config(overrides={k: v for k, v in req.items() if k != "seeds"})
    from_cli = cli.build_config(cli.build_parser().parse_args(["stats"]))
    for cfg in (from_form, from_api, from_cli):
        assert {k: getattr(cfg, k) for k in SETTING_KEYS} == declared


def _edge_values(name: str) -> list[tuple[object, bool]]:
    """(value, valid) pairs at each declared bound of a numeric setting."""
    schema = setting_schema(name)
    step = 1 if schema["type"] == "integer" else 0.5
    cases: list[tuple[object, bool]] = []
    if "minimum" in schema:
        cases += [(schema["minimum"], True), (schema["minimum"] - step, False)]
    if "exclusiveMinimum" in schema:
        lo = schema["exclusiveMinimum"]
        cases += [(lo, False), (lo + step, True)]
    if "maximum" in schema:
        cases += [(schema["maximum"], True), (schema["maximum"] + step, False)]
    if schema["type"] == "integer":
        cases.append((2.5, False))
    return cases


EDGE_CASES = [(n, v, ok) for n in SETTING_KEYS if setting_schema(n)["type"] in ("integer", "number")
              for v, ok in _edge_values(n)]
EDGE_CASES += [("crawl_id", "news-1", True), ("crawl_id", "Bad Id", False), ("crawl_id", "x" * 64, False),
               ("allowed_hosts", r"\.example$", True), ("allowed_hosts", "([", False)]


@pytest.mark.parametrize(("name", "value", "valid"), EDGE_CASES)
def test_bounds_agree(params, request_cls, no_crawl_env, tmp_path, capsys, name: str, value, valid: bool) -> None:
    """The form, the API model, the engine's config and the CLI accept or refuse the same value."""
    seeds = ["http://a.example/"]
    # Params (JSON schema) can express everything but "is a valid regex": that one the engine checks.
    if name != "allowed_hosts":
        if valid:
            params.deep_merge({name: value}).validate()
        else:
            with pytest.raises(ParamValidationError):
                params.deep_merge({name: value}).validate()
    body = {"crawl_id": "c1", "seeds": seeds, name: value}
    if valid:
        request_cls(**body)
    else:
        with pytest.raises(ValidationError, match=name):
            request_cls(**body)
    flag = "--" + name.replace("_", "-")
    try:
        code = cli.main(["stats", "--root", str(tmp_path), f"{flag}={value}"])
    except SystemExit as exc:  # argparse refuses a value of the wrong type ("invalid int value")
        code = exc.code
    err = capsys.readouterr().err
    if valid:
        assert code == 0, err
    else:
        assert code == 2 and (f"error: {name}:" in err or f"{flag}: invalid" in err), err


# ---- the form's seed pattern (crawl.config.seed_pattern) against the engine's rule (validate_seeds) ----
ACCEPTED_SEEDS = [
    "http://a.example/", "HTTPS://A.EXAMPLE/X", "hTTpS://a.example", "http:a.example", "http:/a.example/",
    "http:///a.example/", "http:\\\\a.example\\p", "  http://a.example/  ", "http://a.example/\r",
    "http://a.example/\u00a0", "https://bücher.de/straße", "https://xn--bcher-kva.de/", "http://[2606:4700::1111]/",
    "http://[2606:4700::1111]:8080/x", "http://1.1.1.1:81/", "https://user:pw@a.example:8443/p?q=1#f",
    "http://a.example?x", "http://a.example/" + "p" * (2048 - len("http://a.example/")),
]
REFUSED_BY_FORM = ["example.org", "http://a.example/ http://b.example/", "htp://x", "", "   ", "http://",
                   "http://a.example/\thttp://b.example/", "mailto:x@y.z", "//a.example/", "ftp://files.example/"]


def _engine_accepts(seed: str, schemes: tuple[str, ...]) -> bool:
    from crawl.errors import SeedError
    from crawl.round import validate_seeds

    try:
        validate_seeds([seed], CrawlConfig(allowed_schemes=schemes))
    except SeedError:
        return False
    return True


@functools.cache
def _form_validator(schemes: tuple[str, ...]):
    import jsonschema

    spec = param_specs(["http://a.example/"], seed_schemes=schemes)["seeds"]
    return jsonschema.Draft202012Validator({k: v for k, v in spec.items() if k not in ("default", "title")})


def _form_accepts(seed: str, schemes: tuple[str, ...]) -> bool:
    """What Airflow's API server does on trigger: jsonschema on the Param's schema (Python ``re``)."""
    return _form_validator(schemes).is_valid([seed])


def _fuzz_seeds(n: int = 4000) -> list[str]:
    """Half URL-shaped (random-case scheme, separator, host, port, path, surrounding whitespace), half
    random chains of URL pieces and whitespace."""
    import random

    rng = random.Random(18)
    parts = ["http", "HTTP", "Https", "ftp", "htp", "", ":", "://", ":/", ":\\\\", "/", "//", "a.example", "[::1]",
             "[2606:4700::1111]", "1.2.3.4", ":80", "@", "?q", "#f", " ", "\t", "\n", "\u3000", "ü", "%20", "x"]
    space = ["", "", " ", "\t", "\r", "\n", "\u00a0", "\u3000", "\x1c"]
    hosts = ["a.example", "A.Example", "bücher.de", "[2606:4700::1111]", "1.1.1.1", "127.0.0.1", "", "a b.example"]
    paths = ["", "/", "/p?q=1#f", "/a%20b", "/x y", "?q", "#f", "/\\p", "/p\tq"]
    out = []
    for i in range(n):
        if i % 2:
            out.append("".join(rng.choice(parts) for _ in range(rng.randint(1, 7))))
            continue
        scheme = "".join(c.upper() if rng.random() < 0.3 else c for c in rng.choice(["http", "https", "ftp", "htp"]))
        path = rng.choice(paths) + ("/" + "p" * rng.randint(1900, 2100) if rng.random() < 0.05 else "")
        out.append(rng.choice(space) + scheme + rng.choice([":", "://", ":/", ":///", ":\\\\", "//"])
                   + rng.choice(["", "", "u:p@"]) + rng.choice(hosts) + rng.choice(["", "", ":8443", ":0", ":99999"])
                   + path + rng.choice(space))
    return out


@pytest.mark.parametrize("schemes", [("http", "https"), ("http", "https", "ftp"), ("https",)])
def test_the_form_pattern_admits_every_seed_the_engine_accepts(schemes) -> None:
    corpus = ACCEPTED_SEEDS + REFUSED_BY_FORM + ["ftp://files.example/a", "FTP://files.example/"] + _fuzz_seeds()
    admitted_wrongly = []
    for seed in corpus:
        if _engine_accepts(seed, schemes):
            assert _form_accepts(seed, schemes), (schemes, seed)  # never refuse what the engine takes
        elif _form_accepts(seed, schemes):
            admitted_wrongly.append(seed)  # fine: the engine refuses it at inject (host, port, filters)
    for seed in ACCEPTED_SEEDS:
        if schemes != ("https",) or seed.lower().lstrip().startswith("https"):
            assert _engine_accepts(seed, schemes), seed  # the corpus holds what it claims
    assert all(not _form_accepts(s, schemes) for s in REFUSED_BY_FORM if not s.lower().startswith(schemes))


def test_the_form_refuses_the_bad_seeds_operators_type() -> None:
    for seed in REFUSED_BY_FORM:
        assert not _engine_accepts(seed, ("http", "https")), seed
        assert not _form_accepts(seed, ("http", "https")), seed
    assert _form_accepts("ftp://files.example/", ("http", "https", "ftp"))


def test_the_seed_pattern_is_the_same_in_python_and_ecmascript() -> None:
    """Python ``re`` (jsonschema on the API server) and ECMAScript (a browser; Node here) compile the
    pattern and agree on every seed of the corpus but those with the characters their ``\\s`` disagree on
    (U+001C-U+001F, U+FEFF); Python's ``\\s`` is exactly what ``str.isspace`` (the engine's strip and
    whitespace check) calls whitespace."""
    import json
    import re
    import shutil
    import subprocess
    import sys

    assert all(bool(re.match(r"\s", chr(i))) == chr(i).isspace() for i in range(sys.maxunicode + 1))
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node")
    pattern = seed_pattern(("http", "https", "ftp"))
    corpus = ACCEPTED_SEEDS + REFUSED_BY_FORM + _fuzz_seeds(1000)
    script = ("const [p, seeds] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
              "const r = new RegExp(p, 'u'); process.stdout.write(JSON.stringify(seeds.map(s => r.test(s))));")
    out = subprocess.run([node, "-e", script], input=json.dumps([pattern, corpus]), capture_output=True,
                         text=True, check=True, timeout=60).stdout
    differ = set("\x1c\x1d\x1e\x1f\ufeff")
    py = [re.search(pattern, s) is not None for s in corpus]
    js = json.loads(out)
    assert [j for j, p, s in zip(js, py, corpus, strict=True) if not differ & set(s)] == \
        [p for p, s in zip(py, corpus, strict=True) if not differ & set(s)]
    assert sum(1 for s in corpus if not differ & set(s)) > 800
