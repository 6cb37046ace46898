"""``CRAWL_*`` environment variables as an operator sets them: a misspelt key is refused naming the key it
probably meant (the CLI run as a user runs it: status 2, one line, nothing written), a name close to no key is
named in a warning and otherwise left alone, and the project's own non-key variables (``crawl.config.OTHER_ENV``)
pass silently. The list of those is checked against every such name the repository uses or documents."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawl.config import ENV_PREFIX, OTHER_ENV, ConfigError, CrawlConfig, _check_env_names

REPO = Path(__file__).resolve().parent.parent
CRAWL = [sys.executable, "-m", "crawl"]


def _crawl(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith((ENV_PREFIX, "RECRAWL_"))}
    return subprocess.run([*CRAWL, *args], capture_output=True, text=True, timeout=120, cwd=tmp,
                          env={**clean, "PYTHONPATH": str(REPO), **env})


@pytest.mark.parametrize(("var", "says"), [
    ("CRAWL_MAX_PAGE_PER_HOST", "did you mean CRAWL_MAX_PAGES_PER_HOST?"),
    ("CRAWL_POLITNESS_DELAY_S", "did you mean CRAWL_POLITENESS_DELAY_S?"),
    ("CRAWL_max_pages", "did you mean CRAWL_MAX_PAGES?"),  # the environment is case-sensitive; the keys upper
    ("CRAWL_SCHEDULE", "did you mean RECRAWL_SCHEDULE?"),  # the DAG's own variables are RECRAWL_*
], ids=["dropped-letter", "misspelt", "lower-case", "deployment-variable"])
def test_a_misspelt_crawl_variable_stops_the_cli_naming_the_key(tmp_path: Path, var: str, says: str) -> None:
    root = tmp_path / "root"
    out = _crawl(tmp_path, {var: "5"}, "inject", "--root", str(root), "--seeds", "http://a.example/")
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {var} (environment): no such config key; {says}"), lines
    assert list(tmp_path.iterdir()) == [], "nothing may be written, not even the crawl root"


def test_a_name_close_to_no_key_is_named_once_and_the_projects_own_pass(tmp_path: Path) -> None:
    root = tmp_path / "root"
    ours = {var: "1" for var in OTHER_ENV}  # the deployment's, as a shell that sourced .env has them
    out = _crawl(tmp_path, {**ours, "CRAWL_TIMEOUT": "3", "CRAWL_MAX_PAGES": "7"},
                 "inject", "--root", str(root), "--seeds", "http://a.example/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.splitlines() == ["ignoring CRAWL_TIMEOUT (environment): no such config key (nearest: "
                                       "CRAWL_READ_TIMEOUT_S); the keys are in include/config/crawl.yaml"], out.stderr
    out = _crawl(tmp_path, {**ours, "CRAWL_MAX_PAGES": "7"}, "stats", "--root", str(root))
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_an_unknown_key_in_a_file_or_set_names_the_key_it_probably_meant(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("max_redirect: 3\n")
    out = _crawl(tmp_path, {}, "stats", "--root", str(tmp_path / "root"), "--config", str(f))
    assert out.returncode == 2 and out.stderr.strip() == \
        f"error: max_redirect: unknown config key (in {f}); did you mean max_redirects?", out.stderr
    out = _crawl(tmp_path, {}, "stats", "--root", str(tmp_path / "root"), "--set", "verify_ssl=false")
    assert out.returncode == 2 and out.stderr.strip() == \
        "error: verify_ssl: unknown config key; did you mean verify_tls?", out.stderr
    assert list(tmp_path.iterdir()) == [f]


# What the repository uses or documents as an environment variable: every CRAWL_*/RECRAWL_* name in its
# deployment files, code, scripts, tests and docs. This file (deliberate typos, some only warned about) and
# bench/RESULTS.md (a log of findings, quoting them) are not documentation of a variable.
_SCANNED = ("README.md", "Dockerfile", "Makefile", "docker-compose.yaml", ".env.example", "pyproject.toml", ".ci")
_DIRS = ("crawl", "dags", "plugins", "scripts", "tests", "bench", "include")
_TEXT = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ".json", ".sql", ".cfg", ".ini", ""}
_NAME = re.compile(r"\b(?:RE)?CRAWL_[A-Za-z0-9_]*[A-Za-z0-9]")


def _files() -> list[Path]:
    out = [REPO / n for n in _SCANNED if (REPO / n).is_file()]
    out += [p for n in (*_DIRS, ".ci") for p in (REPO / n).rglob("*")
            if p.is_file() and p.suffix in _TEXT and "__pycache__" not in p.parts]
    return [p for p in out if p.name != Path(__file__).name and p != REPO / "bench" / "RESULTS.md"]


def _refused(var: str) -> bool:
    """A misspelling the config refuses (a test's deliberate typo): not a variable anything reads."""
    try:
        _check_env_names({var: "1"}, set(CrawlConfig.__dataclass_fields__))
    except ConfigError:
        return True
    return False


def test_every_variable_the_repository_names_is_a_key_or_listed() -> None:
    texts = {p: p.read_text(encoding="utf-8", errors="replace") for p in _files()}
    # Python names that only look like variables (CRAWL_ID_RE, simweb's CRAWL_DELAYS, ...)
    assigned = {m for p, t in texts.items() if p.suffix == ".py"
                for m in re.findall(r"^\s*((?:RE)?CRAWL_[A-Z0-9_]+)\s*[:=]", t, re.M)}
    keys = {ENV_PREFIX + f.upper() for f in CrawlConfig.__dataclass_fields__}
    named = {m: p for p, t in texts.items() for m in _NAME.findall(t)}
    stray = {m: str(p.relative_to(REPO)) for m, p in named.items()
             if m not in keys | set(OTHER_ENV) | assigned and not _refused(m)}
    assert not stray, f"add these to crawl.config.OTHER_ENV (or fix the spelling): {stray}"
    assert set(OTHER_ENV) <= set(named), "OTHER_ENV lists a variable nothing uses"

