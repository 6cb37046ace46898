"""What an operator's mistakes on the command line get back: ``python -m crawl`` as a real process on real
roots. Bad input exits with status 2 and one line naming what was wrong (README, *Crawl from the command
line*: "2 bad input"), never a traceback, and writes nothing; the read-side commands answer on a crawl
that has not published a round yet; a pipe closed early ends the command quietly."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest

from crawl import query

CRAWL = [sys.executable, "-m", "crawl"]


def _crawl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CRAWL, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(("argv", "says"), [
    (["stats", "--config", "{tmp}/no-such.yaml"], "config file {tmp}/no-such.yaml: cannot be read"),
    (["round", "--now", "yesterday", "--no-dashboard"], "--now: not an ISO 8601 time"),
    (["run", "--rounds", "-1", "--seeds", "http://a.example/", "--no-dashboard"], "--rounds: must be >= 0"),
], ids=["missing-config-file", "bad-now", "negative-rounds"])
def test_bad_input_exits_2_names_it_and_writes_nothing(tmp_path: Path, argv: list[str], says: str) -> None:
    root = tmp_path / "root"
    out = _crawl(*[a.replace("{tmp}", str(tmp_path)) for a in argv], "--root", str(root))
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert says.replace("{tmp}", str(tmp_path)) in out.stderr and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert not root.exists()  # no lease taken, no round started, nothing injected


def test_a_seed_without_a_scheme_is_named_with_the_spelling_that_works(tmp_path: Path) -> None:
    out = _crawl("inject", "--root", str(tmp_path / "root"), "--seeds", "example.org/news")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "'example.org/news': no scheme: write it as http://example.org/news" in out.stderr, out.stderr
    assert not (tmp_path / "root").exists()


def test_long_and_many_bad_seeds_get_a_bounded_message_naming_each(tmp_path: Path) -> None:
    """A 2,100-character seed is echoed as its first 100 characters and its length, with its reason; a
    long seed without a scheme likewise, and its reason (which quotes it) is cut too; past 20 bad seeds
    the rest are counted. Before, the message held every seed in full (over 2,100 characters for one)."""
    long_seed = "http://a.example/" + "x" * (2100 - len("http://a.example/"))
    no_scheme = "example.org/" + "y" * 500
    others = [f"gopher://h{i}.example/" for i in range(30)]
    out = _crawl("inject", "--root", str(tmp_path / "root"), "--seeds", long_seed, no_scheme, *others)
    assert out.returncode == 2, out.stderr[-2000:]
    err = out.stderr.strip()
    assert err.startswith("error: 32 invalid seed(s), nothing was written: ") and "Traceback" not in err, err[-2000:]
    assert f"{long_seed[:100]!r}… (2,100 chars): longer than 2048 characters" in err, err
    reason = f"no scheme: write it as http://{no_scheme}"
    assert f"{no_scheme[:100]!r}… (512 chars): {reason[:200]}… (542 chars); " in err, err
    named = [s for s in others if f"'{s}': scheme must be http or https, got 'gopher'" in err]
    assert named == others[:18] and err.endswith("; and 12 more"), err[-300:]
    assert len(err) < 3000, len(err)
    assert not (tmp_path / "root").exists()


def test_queries_answer_before_the_first_round_and_bad_sql_is_bad_input(tmp_path: Path) -> None:
    """After ``crawl inject`` (state written, no round published) every named query and the README's
    queries over each view return no rows instead of failing on a missing column."""
    root = str(tmp_path / "root")
    assert _crawl("inject", "--root", root, "--seeds", "http://a.example/").returncode == 0
    for name in query.named_queries():
        assert query.run(root, "demo", name).num_rows == 0, name
    for sql in ("SELECT url_host_name, count(*) FROM pages WHERE subset = 'warc' AND crawl_status = 'fetched' "
                "GROUP BY 1",
                "SELECT url, status, next_fetch_time, priority, change_rate, importance FROM crawldb",
                "SELECT format, count(*), avg(width), count(camera_model) FROM images GROUP BY 1",
                "SELECT url, page_count, title FROM text WHERE page_count IS NOT NULL",
                "SELECT from_hash, to_url, kind FROM links"):
        assert query.run(root, "demo", sql).num_rows == 0, sql
    out = _crawl("query", "--root", root, "summary")
    assert out.returncode == 0 and out.stdout.startswith("round"), out.stderr[-2000:]
    bad = _crawl("query", "--root", root, "SELECT no_such_column FROM pages")
    assert bad.returncode == 2 and bad.stderr.startswith("error: Binder Error") and "Traceback" not in bad.stderr


def test_stats_of_no_crawl_says_so_on_stderr(tmp_path: Path) -> None:
    out = _crawl("stats", "--root", str(tmp_path / "typo"))
    assert out.returncode == 0 and json.loads(out.stdout) is None
    assert f"no crawl 'demo' under {tmp_path / 'typo'}" in out.stderr
    assert not (tmp_path / "typo").exists()


def test_a_reader_that_leaves_early_ends_the_command_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.Popen([*CRAWL, "query", "--json", "--root", str(tmp_path), "SELECT range AS n FROM range(200000)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.read(100)  # more than a pipe's buffer is still to come
    proc.stdout.close()  # as `| head -c 100` does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141, err.decode()[-2000:]
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()[-2000:]


def test_a_step_out_of_order_is_bad_input_and_a_wrong_root_stays_untouched(tmp_path: Path) -> None:
    root = tmp_path / "root"
    out = _crawl("step", "fetch_parse", "--round", "1", "--root", str(root), "--no-dashboard")
    assert out.returncode == 2 and f"no crawl 'demo' under {root}" in out.stderr, out.stderr[-2000:]
    assert not root.exists()  # no lease file in a folder the operator never meant
    assert _crawl("inject", "--root", str(root), "--seeds", "http://a.example/").returncode == 0
    out = _crawl("step", "fetch_parse", "--round", "1", "--root", str(root), "--no-dashboard")
    assert out.returncode == 2 and out.stderr.strip().endswith("error: round 1: generate has not run"), \
        out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_a_seed_the_address_guard_would_refuse_is_refused_up_front(tmp_path: Path, simweb) -> None:
    """A seed on the simulated web's own address without a --resolve rule naming it (README: "an IP literal is
    allowed only when a rule names it"): refused before anything is written, naming the guard and the way
    through (it used to be injected and dropped at fetch time, the round degraded); with the rule it is crawled."""
    seed = f"http://127.0.0.1:{simweb.port}/"
    out = _crawl("round", "--root", str(tmp_path / "root"), "--seeds", seed, "--delay", "0", "--no-dashboard",
                 "--strict", timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "private-address guard" in out.stderr and "--resolve rule" in out.stderr, out.stderr[-2000:]
    assert not (tmp_path / "root").exists()
    ok = _crawl("round", "--root", str(tmp_path / "ok"), "--seeds", seed, "--delay", "0", "--no-dashboard",
                "--strict", "--max-pages", "1", "--resolve", f"127.0.0.1=127.0.0.1:{simweb.port}", timeout=300)
    assert ok.returncode == 0 and "private-address guard" not in ok.stderr, ok.stderr[-2000:]


def test_reprioritise_of_a_published_round_is_refused_and_its_crawldb_kept(tmp_path: Path, simweb) -> None:
    """A published CrawlDb version is what readers see: `crawl step reprioritise --round N` after N's publish
    (a --now of another time, or none: now) rewrote it in place with other priorities and due times; update
    already refused such a rerun."""
    root = tmp_path / "root"
    first = _crawl("round", "--root", str(root), "--seeds", *simweb.seed_urls(2), "--delay", "0", "--max-pages", "5",
                   "--no-dashboard", "--resolve", simweb.resolve_rule, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    files = sorted((root / "state/crawl=demo/crawldb/v=00001").rglob("*.parquet"))
    before = {f: f.read_bytes() for f in files}
    for step in ("update", "reprioritise"):
        out = _crawl("step", step, "--round", "1", "--root", str(root), "--now", "2030-01-01T00:00:00Z")
        assert out.returncode == 2 and "round 1 is already published" in out.stderr, (step, out.stderr[-2000:])
    assert sorted((root / "state/crawl=demo/crawldb/v=00001").rglob("*.parquet")) == files
    assert all(f.read_bytes() == b for f, b in before.items())


def _crawl_files(root: Path) -> dict[str, bytes]:
    """Every file of the crawl root but the lease's (a refused step takes and releases the lease: who ran
    last, not crawl data)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "lease" not in p.relative_to(root).parts}


def test_update_before_the_fetch_is_refused_naming_the_step_and_a_rerun_still_works(tmp_path: Path, simweb) -> None:
    """`crawl step update --round 1` right after inject (no fetch list) ran, and the round's publish then
    published a round that fetched nothing; after a fetch_parse cut off part-way, update merged half the round.
    Each is refused naming the step to run, with nothing changed; the steps in order then run, a completed
    update runs again as before, and the fetch left undone is done once (the simulated web's access log)."""
    import time

    from crawl.config import load_config
    from crawl.tasks import fetch_parse_task

    root = tmp_path / "root"
    now = "2026-12-03T12:00:00Z"
    common = ["--root", str(root), "--resolve", simweb.resolve_rule, "--delay", "0", "--partitions", "2",
              "--now", now]
    seeds = simweb.seed_urls(6)
    assert _crawl("step", "inject", *common, "--seeds", *seeds).returncode == 0

    def refused(step: str, says: str) -> None:
        before = _crawl_files(root)
        out = _crawl("step", step, "--round", "1", *common, "--no-dashboard")
        assert out.returncode == 2 and out.stderr.strip() == f"error: {says}", (step, out.returncode, out.stderr[-2000:])
        assert _crawl_files(root) == before, f"a refused {step} changed the crawl"

    refused("update", "round 1: generate has not run")
    refused("reprioritise", "round 1: update has not run")
    since = time.time()
    gen = json.loads(_crawl("step", "generate", *common).stdout.splitlines()[-1])
    assert len(gen["partitions"]) == 2 and gen["urls"] == len(seeds), gen
    refused("update", "round 1: fetch_parse has not run")
    # a fetch_parse cut off after one partition: that partition's task ran (the engine's own, in this process)
    cfg = load_config(overrides={"root": str(root), "resolve": [simweb.resolve_rule], "politeness_delay_s": 0,
                                 "partitions": 2}, use_env=False)
    fetch_parse_task(cfg, 1, 1, datetime.fromisoformat(gen["now"]))
    refused("update", "round 1: fetch_parse has not finished: 1 of 2 partitions not fetched and parsed (000); "
                      "run it again")
    refused("reprioritise", "round 1: update has not run")

    assert _crawl("step", "fetch_parse", "--round", "1", *common, "--no-dashboard").returncode == 0
    first = _crawl("step", "update", "--round", "1", *common)
    again = _crawl("step", "update", "--round", "1", *common)  # a retried or cleared task
    assert first.returncode == again.returncode == 0, again.stderr[-2000:]
    assert json.loads(first.stdout) == json.loads(again.stdout)
    for step in ("reprioritise", "publish"):
        out = _crawl("step", step, "--round", "1", *common)
        assert out.returncode == 0, (step, out.stderr[-2000:])
    log = simweb.log()
    log = log.filter(pc.and_(pc.greater_equal(log["start"], since), pc.starts_with(log["user_agent"], "RecrawlBot")))
    pages = [f"http://{h}{p}" for h, p in zip(log["host"].to_pylist(), log["path"].to_pylist(), strict=True)
             if p != "/robots.txt"]
    assert [pages.count(s) for s in seeds] == [1] * len(seeds), \
        "each seed fetched once: the rerun fetched only the partition left undone"
    fetched = query.run(str(root), "demo", "SELECT url FROM pages WHERE subset = 'warc' AND crawl_status = 'fetched'")
    assert sorted(fetched.column("url").to_pylist()) == sorted(seeds), "the published round has every seed"


def test_query_of_a_crawl_that_is_not_there_says_so(tmp_path: Path) -> None:
    """README's `crawl query --root crawldata "SELECT ... FROM crawldb"` without --crawl-id reads crawl 'demo':
    over a root holding only a crawl started from the UI it printed an empty table and exited 0, as if the
    crawl had nothing. Now stderr names the crawl that is missing and the crawls under the root (the query
    still runs: a crawl injected but not yet published has empty views, by design)."""
    root = tmp_path / "root"
    assert _crawl("inject", "--root", str(root), "--crawl-id", "fromui", "--seeds", "http://a.example/").returncode == 0
    out = _crawl("query", "--root", str(root), "SELECT count(*) AS n FROM crawldb")
    assert out.returncode == 0 and "n" in out.stdout, out.stderr[-2000:]
    assert f"no crawl 'demo' under {root}" in out.stderr and "fromui" in out.stderr, out.stderr[-2000:]
    out = _crawl("query", "--root", str(root), "--crawl-id", "fromui", "SELECT count(*) AS n FROM crawldb")
    assert out.returncode == 0 and "no crawl" not in out.stderr, out.stderr[-2000:]
